"""The console's tests (core/views, core/console, templates): pages, actions, junk input,
rendering, and real-browser tests (Playwright on Debian's chromium, marked slow) against a
stack started by tests/console/test_browser.py; fixtures from tests/console_fixtures.py and
tests/action_fixtures.py, imported by name where used."""

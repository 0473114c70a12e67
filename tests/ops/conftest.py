"""The service layer's and the commands' tests (core/ops, core/cli): actions, bulk, audit,
permissions, from every entry point; Users from tests/ops_support.py, Clients from
tests/action_fixtures.py, imported by name where used."""

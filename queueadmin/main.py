"""The `queueadmin` command (an entry point of the package): Django's management commands with
the project's settings, as `manage.py` runs them in a checkout.

    queueadmin runstack            # the whole stack, state in ./var (or QA_VAR_DIR)
    queueadmin runworker --queue default
    queueadmin datajob submit ...
    python -m queueadmin migrate   # the same, where the script is not on PATH
"""

from __future__ import annotations

import gc
import os
import sys

# Exit status of a command given bad input: an argument, an option or a setting that is not
# valid (docs/operations.md). Settings that cannot be loaded are one: queueadmin run from /
# without QA_VAR_DIR, a port that is not a number.
BAD_INPUT = 2


def run() -> None:
    """The entry points' main() (the `queueadmin` script, `python -m queueadmin`, a checkout's
    manage.py): the command, then, on the way out, every object it made moved out of the
    garbage collector's sight (gc.freeze). The interpreter's teardown collects garbage over
    every object left, a Django process's hundreds of thousands: 0.24-0.32 s of every command
    on a slow machine (`manage.py help`, a data job's `--wait`), 0.03 s after the freeze.
    atexit handlers (logging's, OpenTelemetry's flush, temporary folders') and the finalizers
    of objects freed as their references go run as before; objects held only by reference
    cycles are not collected, and their memory goes back with the process's."""
    from queueadmin.handoff import run_served

    served = run_served(sys.argv)  # by the running stack, when it can (queueadmin/handoff.py)
    if served is not None:
        sys.exit(served)
    try:
        main()
    finally:
        gc.freeze()


def main(argv: list[str] | None = None) -> None:
    """Run the management command that `argv` (default sys.argv) names."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueadmin.settings")
    from django.core.management import execute_from_command_line

    argv = list(sys.argv if argv is None else argv)
    # Django's help names the program after argv[0]: "queueadmin", not "main.py"/"__main__.py".
    if argv and os.path.basename(argv[0]) in ("__main__.py", "main.py"):
        argv[0] = "queueadmin"
    _load_settings(os.path.basename(argv[0]) if argv else "queueadmin", argv[1:])
    execute_from_command_line(argv)


def _load_settings(prog: str, args: list[str]) -> None:
    """Load the settings before Django does, so that settings that cannot be loaded are one
    line and exit status 2: Django would show the settings module's traceback (41 lines for
    `queueadmin runstack` run from /). With --settings or --pythonpath, or --traceback, left
    to Django."""
    if any(a.startswith(("--settings", "--pythonpath", "--traceback")) for a in args):
        return
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    try:
        settings.INSTALLED_APPS  # noqa: B018 (imports the settings module)
    except ImproperlyConfigured as exc:
        _fail(prog, str(exc))
    except ValueError as exc:  # int("abc") of a variable such as PORT or QA_REDIS_PORT
        _fail(prog, f"a setting from the environment is not valid: {exc} (the variables: "
                    "docs/deployment.md)")


def _fail(prog: str, message: str) -> None:
    sys.stderr.write(f"{prog}: error: {message}\n")
    sys.exit(BAD_INPUT)

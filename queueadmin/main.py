"""The `queueadmin` command (an entry point of the package): Django's management commands with
the project's settings, as `manage.py` runs them in a checkout.

    queueadmin runstack            # the whole stack, state in ./var (or QA_VAR_DIR)
    queueadmin runworker --queue default
    queueadmin datajob submit ...
    python -m queueadmin migrate   # the same, where the script is not on PATH
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> None:
    """Run the management command that `argv` (default sys.argv) names."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueadmin.settings")
    from django.core.management import execute_from_command_line

    argv = list(sys.argv if argv is None else argv)
    # Django's help names the program after argv[0]: "queueadmin", not "main.py"/"__main__.py".
    if argv and os.path.basename(argv[0]) in ("__main__.py", "main.py"):
        argv[0] = "queueadmin"
    execute_from_command_line(argv)

#!/usr/bin/env python
"""Django's command-line utility in a checkout: the `queueadmin` command that an installed
wheel puts on PATH (queueadmin/main.py)."""

from queueadmin.main import run

if __name__ == "__main__":
    run()

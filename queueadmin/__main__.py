"""`python -m queueadmin ...`: the `queueadmin` command (queueadmin/main.py). The stack runs
its services this way, so that they need neither a checkout's manage.py nor the script on
PATH."""

from queueadmin.main import run

run()

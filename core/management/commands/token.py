"""`manage.py token create NAME --user USER --scope read|operate|admin [--expires 90d]`,
`token revoke NAME`, `token list`: the HTTP API's tokens (docs/api.md). create prints the
token on its output's last line, once; only its digest is stored."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from core.cli import actor_option, add_actor_option, raw_stream
from core.management.base import QueueadminCommand


class Command(QueueadminCommand):
    help = ("Create, revoke or list the HTTP API's tokens. A token acts as its user, narrowed "
            "by its scope (read, operate, admin); create prints it once, on the last line.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="command", required=True)
        create = sub.add_parser("create", help="a new token, printed once")
        create.add_argument("name", help="the token's name, as the audit log shows it")
        create.add_argument("--user", required=True, help="the console user it acts as")
        create.add_argument("--scope", required=True, choices=["read", "operate", "admin"])
        create.add_argument("--expires", default=None, metavar="DURATION",
                            help="how long it is valid: 30d, 12h, 1w... or never (default 90d)")
        add_actor_option(create)
        revoke = sub.add_parser("revoke", help="refuse every call with it from now on")
        revoke.add_argument("name")
        add_actor_option(revoke)
        listing = sub.add_parser("list", help="the tokens, newest first (never their text)")
        add_actor_option(listing)

    def handle(self, *args: Any, **o: Any) -> None:
        from core.cli import tokens

        who = actor_option(o["as_user"])
        if o["command"] == "create":
            tokens.create(who, o["name"], user=o["user"], scope=o["scope"],
                          expires=o["expires"], out=raw_stream(self.stdout))
        elif o["command"] == "revoke":
            tokens.revoke(who, o["name"], out=raw_stream(self.stdout))
        else:
            tokens.listing(who, out=raw_stream(self.stdout))

"""`manage.py alert`: alert channels and rules (docs/alerts.md).

    manage.py alert channel add oncall --webhook https://example.org/hook [--secret S]
    manage.py alert channel add team --slack https://hooks.slack.com/services/...
    manage.py alert channel add ops --email ops@example.org
    manage.py alert channel test oncall
    manage.py alert rule add new-bugs --when new-fingerprint --queue default --channel oncall
    manage.py alert rule add stuck --when no-live-worker --for 1m --channel oncall
    manage.py alert list
    manage.py alert prometheus --out docs/prometheus
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from core.cli import actor_option, add_actor_option, raw_stream
from core.management.base import QueueadminCommand
from core.models.alert_conditions import CONDITIONS

RULES_FILE, DASHBOARD_FILE = "queueadmin-alerts.rules.yml", "queueadmin-dashboard.json"


class Command(QueueadminCommand):
    help = ("Alert channels (Slack, email, signed webhooks) and rules (what to watch, whom to "
            "tell): add, test, remove, list. Changes are audited with the OS user (or --as) as "
            "the actor; the services process (`runservices`) evaluates the rules and sends.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="noun", required=True,
                                    metavar="channel|rule|list|prometheus")
        channel = sub.add_parser("channel", help="add, test or remove a channel").add_subparsers(
            dest="action", required=True, metavar="add|test|remove")
        add = channel.add_parser("add", help="a channel: --webhook, --slack or --email")
        add.add_argument("name")
        kind = add.add_mutually_exclusive_group(required=True)
        kind.add_argument("--webhook", metavar="URL", help="a generic webhook: signed JSON POSTs")
        kind.add_argument("--slack", metavar="URL", help="a Slack incoming webhook's URL")
        kind.add_argument("--email", metavar="ADDRESS", help="an address (EMAIL_HOST's SMTP)")
        add.add_argument("--secret", help="the webhook's signing secret (default: one is made "
                                          "and shown once)")
        add.add_argument("--max-per-minute", type=int, metavar="N",
                         help="the channel's rate limit (default 20)")
        for name in ("test", "remove"):
            channel.add_parser(name).add_argument("name")
        rule = sub.add_parser("rule", help="add, remove, enable or disable a rule").add_subparsers(
            dest="action", required=True, metavar="add|remove|enable|disable")
        radd = rule.add_parser("add", help="a rule: --when CONDITION ... --channel NAME")
        radd.add_argument("name")
        radd.add_argument("--when", required=True, metavar="CONDITION",
                          help="one of: " + ", ".join(CONDITIONS))
        radd.add_argument("--queue", "-q", default="", help="only this queue")
        for scope in ("handler", "tenant", "job"):
            radd.add_argument(f"--{scope}", default="", help=f"only this {scope}")
        radd.add_argument("--threshold", default="", metavar="X",
                          help="a duration (10m), a count, a share (90%%) or a factor (3x), "
                               "as the condition takes")
        radd.add_argument("--for", dest="for_", default="", metavar="DURATION",
                          help="fire only once the condition has held this long")
        radd.add_argument("--quiet", default="", metavar="DURATION",
                          help="the quiet period (docs/alerts.md)")
        radd.add_argument("--max-per-hour", type=int, metavar="N",
                          help="the rule's rate limit (default 20)")
        radd.add_argument("--channel", action="append", required=True, metavar="NAME",
                          help="a channel to tell (repeat for more)")
        for name in ("remove", "enable", "disable"):
            rule.add_parser(name).add_argument("name")
        sub.add_parser("list", help="channels, rules, open incidents, the outbox")
        prom = sub.add_parser("prometheus", help="the conditions as Prometheus alerting rules "
                                                 "and a Grafana dashboard, from /metrics")
        prom.add_argument("--out", required=True, metavar="DIR",
                          help=f"where to write {RULES_FILE} and {DASHBOARD_FILE}")
        prom.add_argument("--metrics", metavar="FILE",
                          help="a /metrics text saved from a console (default: /metrics as "
                               "this installation serves it)")
        for p in (add, *(channel.choices[n] for n in ("test", "remove")), radd,
                  *(rule.choices[n] for n in ("remove", "enable", "disable"))):
            add_actor_option(p)

    def handle(self, *args: Any, **o: Any) -> None:
        from core.cli import alerts as cli  # the service layer: not for `--help`

        out = raw_stream(self.stdout)
        noun, action = o["noun"], o.get("action")
        if noun == "list":
            cli.listing(out=out)
            return
        if noun == "prometheus":
            cli.prometheus(o["out"], out=out, metrics=o["metrics"], rules_file=RULES_FILE,
                           dashboard_file=DASHBOARD_FILE)
            return
        actor = actor_option(o["as_user"])
        if noun == "channel" and action == "add":
            cli.channel_add(o["name"], out=out, webhook=o["webhook"], slack=o["slack"],
                            email=o["email"], secret=o["secret"],
                            max_per_minute=o["max_per_minute"], actor=actor)
        elif noun == "channel":
            (cli.channel_test if action == "test" else cli.channel_remove)(
                o["name"], out=out, actor=actor)
        elif action == "add":
            from core.ops.alerts import RuleSpec

            cli.rule_add(RuleSpec(
                name=o["name"], when=o["when"], channels=o["channel"], queue=o["queue"],
                handler=o["handler"], tenant=o["tenant"], job=o["job"],
                threshold=o["threshold"], for_=o["for_"], quiet=o["quiet"],
                max_per_hour=o["max_per_hour"]), out=out, actor=actor)
        else:
            cli.rule_change(str(action), o["name"], out=out, actor=actor)

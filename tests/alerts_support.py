"""Real receivers for the alerts' tests (and bench/bench_alerts.py): a local HTTP server that
records every webhook and Slack call (it can answer slowly, or with errors first), and a local
SMTP server (aiosmtpd) that records every email. No mock of the sending side: messages leave
through urllib and Django's SMTP backend as in production."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Call:
    path: str
    headers: dict[str, str]
    raw: bytes
    at: float  # time.time() when it arrived

    @property
    def json(self) -> Any:
        return json.loads(self.raw)

    def signed_by(self, secret: str, *, tolerance_s: float = 300) -> bool:
        """What docs/alerts.md tells a receiver to check: the HMAC-SHA256 of
        "<timestamp>.<raw body>" under the secret, and a timestamp close to now."""
        ts = self.headers.get("X-Queueadmin-Timestamp", "")
        given = self.headers.get("X-Queueadmin-Signature", "")
        mac = hmac.new(secret.encode(), ts.encode() + b"." + self.raw, hashlib.sha256)
        fresh = ts.isdigit() and abs(time.time() - int(ts)) <= tolerance_s
        return fresh and hmac.compare_digest(given, f"v1={mac.hexdigest()}")


@dataclass
class Receiver:
    """A threading HTTP server on 127.0.0.1 that records every POST. `statuses` are answered
    first, one per call (then 200); `delay_s` holds each answer that long (a slow receiver:
    the call is recorded when it arrives, before the wait)."""

    statuses: list[int] = field(default_factory=list)
    delay_s: float = 0.0
    headers_out: dict[str, str] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)

    def __post_init__(self) -> None:
        receiver = self
        self._lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver.calls.append(Call(self.path, dict(self.headers), raw, time.time()))
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                if receiver.delay_s:
                    time.sleep(receiver.delay_s)
                try:
                    self.send_response(status)
                    for k, v in receiver.headers_out.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the sender was killed (or gave up) meanwhile: recorded all the same

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # A short poll, so that stop() (shutdown waits for the loop's next look) takes
        # milliseconds, not serve_forever's default half second at every test's end.
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,),
                                       daemon=True)
        self.thread.start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def bodies(self, path: str | None = None) -> list[Any]:
        with self._lock:
            return [c.json for c in self.calls if path is None or c.path == path]

    def ids(self, path: str | None = None) -> list[str]:
        return [str(b.get("id") or _slack_id(b)) for b in self.bodies(path)]

    def wait_for(self, n: int, timeout: float, path: str | None = None) -> list[Any]:
        return wait(lambda: len(self.bodies(path)) >= n, timeout,
                    lambda: f"{n} calls at {path or 'any path'}; got {self.bodies(path)}",
                    then=lambda: self.bodies(path))

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _slack_id(body: dict[str, Any]) -> str:
    """The alert id in a Slack message's context line."""
    for block in body.get("blocks", []):
        for el in block.get("elements", []):
            if "alert id" in el.get("text", ""):
                return str(el["text"].rsplit(" ", 1)[-1])
    return ""


def wait(ok: Callable[[], bool], timeout: float, what: Callable[[], str],
         then: Callable[[], Any] = lambda: None) -> Any:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout}s for {what()}")
        time.sleep(0.05)
    return then()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SmtpReceiver:
    """aiosmtpd on 127.0.0.1: every message it accepts, parsed."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.messages: list[Message] = []
        outer = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
                outer.messages.append(message_from_bytes(envelope.original_content))
                return "250 Message accepted for delivery"

        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def wait_for(self, n: int, timeout: float) -> list[Message]:
        return wait(lambda: len(self.messages) >= n, timeout,
                    lambda: f"{n} emails; got {len(self.messages)}", then=lambda: self.messages)

    def stop(self) -> None:
        self.controller.stop()

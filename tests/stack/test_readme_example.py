"""The README's first example runs as written (against the suite's Redis, found as a user's
shell says where: REDIS_URL or QA_REDIS_PORT), and names a handler that its consumer runs and
announces."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from core.stack.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]


def test_the_first_python_example_of_the_readme_runs_to_done_without_a_warning(
    redis_server: RedisServer, prefix: str
) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", readme, re.DOTALL).group(1)  # type: ignore[union-attr]
    assert 'prefix="qa"' in code
    code = code.replace('prefix="qa"', f'prefix="{prefix}"')
    strict = (
        "import warnings\nfrom core.queue.errors import UnknownHandlerWarning\n"
        "warnings.simplefilter('error', UnknownHandlerWarning)\n"
    )

    # The script finds the Redis as a user's shell tells it where: REDIS_URL, or the port of a
    # stack started with QA_REDIS_PORT (the suite's server is on 127.0.0.1).
    host, port = redis_server.url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    assert host == "127.0.0.1"
    for env in ({"REDIS_URL": redis_server.url}, {"QA_REDIS_PORT": port}):
        clean = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "QA_REDIS_PORT")}
        done = subprocess.run([sys.executable, "-c", strict + code], cwd=ROOT,
                              capture_output=True, text=True, timeout=60, env=clean | env)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        lines = done.stdout.splitlines()
        assert re.fullmatch(r"submitted [0-9a-f]{32} 3", lines[0])
        assert lines[1] == "final state: done"

"""docs/api.md's walkthrough, run as written: its shell blocks, in order, in one bash with
real curl against a `manage.py runstack` of this module's own (its worker runs the built-in
echo and fail handlers), and its `python manage.py token ...` in the stack's environment."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser_support import ROOT, Stack, running_stack

pytestmark = pytest.mark.slow

DOC = ROOT / "docs" / "api.md"


def walkthrough() -> str:
    """The shell blocks of the walkthrough's section, in order."""
    text = DOC.read_text()
    section = text.split("## Walkthrough with curl", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    assert len(blocks) >= 8, "the walkthrough lost its shell blocks"
    return "\n".join(blocks)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    with running_stack(tmp_path_factory.mktemp("api-walkthrough-var")) as running:
        yield running


def test_the_walkthrough_runs_as_written(stack: Stack, tmp_path: Path) -> None:
    script = "set -euo pipefail\n" + walkthrough()
    env = stack.env | {
        "API": stack.url("/api/v1"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    done = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    out = done.stdout
    assert done.returncode == 0, f"{done.stderr}\n{out}"
    assert '"created": true' in out and '"state": "done"' in out and '"finished": true' in out
    assert '{"n": 1}' in out and '"total": 3' in out
    assert '"state": "failed"' in out and "upstream refused" in out
    assert '"message": "requeued 1 of 1; 0 skipped"' in out
    codes = [line for line in out.splitlines() if re.fullmatch(r"\d{3}", line)]
    assert codes == ["403", "401"]  # the read token's cancel, then the revoked token's read
    listed = subprocess.run([sys.executable, "manage.py", "token", "list"], cwd=ROOT,
                            env=stack.env, capture_output=True, text=True, timeout=60,
                            check=True).stdout
    assert re.search(r"walkthrough-read\s+admin\s+read\s+revoked", listed), listed
    assert re.search(r"walkthrough\s+admin\s+operate\s+active", listed), listed

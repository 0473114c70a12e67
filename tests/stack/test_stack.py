"""`manage.py runstack` (make run) as a user runs it: a real process tree, real HTTP, and
Ctrl-C / SIGINT / SIGTERM (to it or to `make run`) leaving nothing behind."""

from __future__ import annotations

import http.cookiejar
import os
import re
import shutil
import signal
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import redis

from core.procs import free_port, pid_alive
from core.queue import Queue, read
from core.stack.redis_server import RedisServer, start_redis
from tests.stack_support import Running, StartStack, until

# A stack takes 2-3 s to start and stop; tests that take over ~5 s are marked slow.


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )


def _get(opener: urllib.request.OpenerDirector, url: str) -> tuple[int, str]:
    with opener.open(url, timeout=10) as response:
        return response.status, response.read().decode()


def _log_in(stack: Running, password: str) -> urllib.request.OpenerDirector:
    opener = _opener()
    _, page = _get(opener, stack.url("/admin/login/?next=/"))
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token
    form = urllib.parse.urlencode({
        "csrfmiddlewaretoken": token.group(1), "username": "admin", "password": password,
        "next": "/",
    }).encode()
    opener.open(urllib.request.Request(stack.url("/admin/login/?next=/"), data=form), timeout=10)
    return opener


def _gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
def test_serves_the_console_and_sigint_stops_everything(
    start_stack: StartStack, redis_server: RedisServer
) -> None:
    stack = start_stack(REDIS_URL=redis_server.url, QUEUE_PREFIX="stacktest")
    stack.wait_for_line(r"queueadmin is up")
    gunicorn = stack.pid_of("gunicorn")
    password = stack.wait_for_line(r"created user admin with password (\S+)").group(1)
    assert (stack.var_dir / "admin_password").read_text().strip() == password
    assert "redis-server (pid" not in "".join(stack.lines)  # REDIS_URL given: none started

    assert _get(_opener(), stack.url("/admin/login/"))[0] == 200
    assert _get(_opener(), stack.url("/static/core/console.css"))[0] == 200  # whitenoise
    status, home = _get(_log_in(stack, password), stack.url("/"))
    assert status == 200 and "Queue default" in home

    stack.process.send_signal(signal.SIGINT)

    assert stack.process.wait(30) == 0
    assert _gone(gunicorn)
    said = "".join(stack.lines)
    assert "stopped on SIGINT" in said
    assert "GET /static/core/console.css" not in said  # no access log unless QA_ACCESS_LOG


@pytest.mark.slow
@pytest.mark.parametrize(
    ("setting", "fsync"), [(None, "always"), ("everysec", "everysec")], ids=["default", "everysec"]
)
def test_embedded_redis_is_started_and_sigterm_stops_it(
    start_stack: StartStack, setting: str | None, fsync: str, tmp_path: Path
) -> None:
    redis_port = free_port()
    access = tmp_path / "access.log"
    stack = start_stack(
        QA_REDIS_PORT=str(redis_port), QA_ADMIN_PASSWORD="s3cret-pass",
        QA_ACCESS_LOG=str(access), **({"QA_REDIS_FSYNC": setting} if setting else {}),
    )
    stack.wait_for_line(r"queueadmin is up")
    redis_pid, gunicorn = stack.pid_of("redis-server"), stack.pid_of("gunicorn")
    client = redis.Redis(port=redis_port, decode_responses=True)
    assert client.config_get("appendfsync") == {"appendfsync": fsync}
    client.close()
    assert (stack.var_dir / "redis" / "appendonlydir").is_dir()  # appendonly yes, under var/
    assert (stack.var_dir / "stack.lock").read_text().split() == [
        f"runstack={stack.process.pid}", f"redis-server={redis_pid}",
    ]
    assert not (stack.var_dir / "admin_password").exists()  # the password came from the env
    assert _get(_log_in(stack, "s3cret-pass"), stack.url("/"))[0] == 200
    assert '"GET / HTTP/1.1" 200' in access.read_text()  # QA_ACCESS_LOG: a file of its own

    stack.process.send_signal(signal.SIGTERM)

    assert stack.process.wait(30) == 0
    assert _gone(gunicorn) and _gone(redis_pid)


def test_a_child_that_dies_stops_the_rest_and_fails(start_stack: StartStack) -> None:
    stack = start_stack(QA_REDIS_PORT=str(free_port()))
    stack.wait_for_line(r"queueadmin is up")
    redis_pid, gunicorn = stack.pid_of("redis-server"), stack.pid_of("gunicorn")

    os.kill(gunicorn, signal.SIGKILL)

    assert stack.process.wait(30) == 1
    assert _gone(redis_pid)
    stack.wait_for_line(r"gunicorn \(pid \d+\) exited with code -9")


@pytest.mark.slow
def test_a_worker_that_exits_is_started_again_and_its_tasks_run_again_at_once(
    start_stack: StartStack,
) -> None:
    """A worker killed mid-task: its supervisor restarts it and reaps its leases at once (it
    saw the process exit: nothing of it runs), so the task runs again within seconds, not
    after --dead-after (10 s here), and the kill counts as an attempt. The stack must not go
    down with it (any other child's death still stops everything)."""
    redis_port = free_port()
    stack = start_stack("--workers", "1", QA_REDIS_PORT=str(redis_port), QUEUE_PREFIX="st")
    stack.wait_for_line(r"queueadmin is up")
    first = stack.pid_of("worker-1")
    stack.wait_for_line(r"worker started .*handlers=.*sleep")
    queue = Queue.from_url(f"redis://127.0.0.1:{redis_port}/0", "default", prefix="st")
    sub = queue.submit([{"seconds": 30}], handler="sleep", max_attempts=3)
    until(lambda: read.stats(queue).leased == 1)

    killed = time.monotonic()
    os.kill(first, signal.SIGKILL)

    stack.wait_for_line(rf"worker-1 \(pid {first}\) exited with code -9; starting it again "
                        r"in 1 s \(1 of its tasks back to waiting now\)")
    second = int(stack.wait_for_line(rf"worker-1 \(pid (?!{first}\b)(\d+)\) started").group(1))
    assert pid_alive(second) and stack.process.poll() is None
    until(lambda: read.stats(queue).leased == 1)  # the restarted worker runs it
    assert time.monotonic() - killed < 8  # --dead-after is 10 s
    [entry] = [e for e in read.pending(queue, sub.request_id)
               if not e.consumer.startswith("~")]
    assert entry.deliveries == 2 and entry.consumer.endswith("worker-1.2")
    queue.cancel(sub.request_id)
    queue.redis.close()
    stack.process.send_signal(signal.SIGTERM)
    assert stack.process.wait(30) == 0
    assert _gone(second)


@pytest.mark.slow
def test_a_second_stack_on_the_same_var_dir_is_refused_at_once(start_stack: StartStack) -> None:
    first = start_stack(QA_REDIS_PORT=str(free_port()))
    first.wait_for_line(r"queueadmin is up")
    redis_pid = first.pid_of("redis-server")

    second_redis_port = free_port()
    second = start_stack(QA_REDIS_PORT=str(second_redis_port))  # other ports, same var/

    assert second.process.wait(30) == 1
    output = "".join(second.lines)
    assert f"QA_VAR_DIR={first.var_dir}" in output
    assert f"runstack pid {first.process.pid}" in output
    assert f"redis-server pid {redis_pid}" in output
    assert "Traceback" not in output and "redis-server (pid" not in output
    with pytest.raises(redis.ConnectionError):  # no second redis-server on the data
        redis.Redis(port=second_redis_port, socket_timeout=1).ping()
    assert _get(_opener(), first.url("/admin/login/"))[0] == 200  # the first one goes on
    first.process.send_signal(signal.SIGTERM)
    assert first.process.wait(30) == 0


def test_sighup_stops_everything_as_sigint_does(
    start_stack: StartStack, redis_server: RedisServer
) -> None:
    """A closed terminal sends SIGHUP: the supervisor must not die alone, leaving its children
    (each in a session of its own) running."""
    stack = start_stack("--workers", "1", REDIS_URL=redis_server.url, QUEUE_PREFIX="stacktest")
    stack.wait_for_line(r"queueadmin is up")
    children = [stack.pid_of("gunicorn"), stack.pid_of("worker-1"), stack.pid_of("services")]

    stack.process.send_signal(signal.SIGHUP)

    assert stack.process.wait(30) == 0
    assert all(_gone(pid) for pid in children)
    assert "stopped on SIGHUP" in "".join(stack.lines)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_sigint_to_make_run_stops_the_whole_stack(start_stack: StartStack) -> None:
    """`kill -INT <pid of make run>`: make passes SIGTERM on to the supervisor, but not SIGINT
    (it waits for its children instead); the supervisor must notice and stop everything."""
    # The project's Makefile and its run recipe, without the install steps. The exec resets
    # SIGINT to its default first: a make that inherits it ignored never sees one.
    argv = [
        sys.executable, "-c",
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execvp(sys.argv[1], sys.argv[1:])",
        "make", "--no-print-directory", "-o", "system-deps", "-o", "install",
        f"PY={sys.executable}", "run",
    ]
    stack = start_stack(argv=argv, QA_REDIS_PORT=str(free_port()))
    stack.wait_for_line(r"queueadmin is up")
    pids = [stack.pid_of(name) for name in ("redis-server", "gunicorn", "worker-1")]
    supervisor = _children_of(stack.process.pid)
    assert len(supervisor) == 1  # make runs the recipe itself, no shell between them

    stack.process.send_signal(signal.SIGINT)

    assert stack.process.wait(10) == -signal.SIGINT  # make ends as a Ctrl-C ends it
    assert all(_gone(pid, timeout=1) for pid in [*supervisor, *pids])
    assert "stopped on SIGINT (sent to make" in "".join(stack.lines)


@pytest.mark.slow
def test_sigint_to_the_supervisor_releases_running_tasks_before_redis_stops(
    start_stack: StartStack,
) -> None:
    redis_port = free_port()
    stack = start_stack("--workers", "1", QA_REDIS_PORT=str(redis_port), QUEUE_PREFIX="st")
    stack.wait_for_line(r"queueadmin is up")
    pids = [stack.pid_of(name) for name in ("redis-server", "gunicorn", "worker-1")]
    stack.wait_for_line(r"worker started .*handlers=.*sleep")  # announced: submit takes it
    url = f"redis://127.0.0.1:{redis_port}/0"
    queue = Queue.from_url(url, "default", prefix="st")
    sub = queue.submit([{"seconds": 60}], handler="sleep", max_attempts=1)
    until(lambda: read.stats(queue).leased == 1)
    # Running in a slot, not only leased: a task handed to the idle worker is leased before a
    # slot takes it, and a stop then gives it back as not taken (no "released" line).
    until(lambda: any(w.info.get("running") == 1 for w in read.workers(queue).items))
    queue.redis.close()

    stack.process.send_signal(signal.SIGINT)

    # The worker's grace (7 s) runs out, its handler stops at its next check and the task
    # is given back (issue 33: only once the handler has returned); Redis stops after that.
    assert stack.process.wait(30) == 0
    assert all(_gone(pid, timeout=1) for pid in pids)
    output = "".join(stack.lines)
    assert "task given back: worker stopping" in output and "stopped on SIGINT" in output, (
        output[-4000:])
    assert "Redis unavailable" not in output
    # What Redis wrote to its append-only file: the task waits again, attempt not spent.
    server = start_redis(stack.var_dir / "redis", appendonly=True)
    try:
        queue = Queue.from_url(server.url, "default", prefix="st")
        after = read.stats(queue)
        assert (after.leased, after.waiting, after.dead) == (0, 1, 0)
        assert queue.state(sub.request_id) == "active"
        queue.redis.close()
    finally:
        server.stop()


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_var_stays_private_and_a_forwarded_proto_is_not_believed(
    start_stack: StartStack, redis_server: RedisServer, tmp_path: Path
) -> None:
    """QA_VAR_DIR made before with wide modes is made private (0700, its secrets 0600); and
    without QA_TRUST_X_FORWARDED_PROTO, gunicorn does not take a request from 127.0.0.1 that
    says X-Forwarded-Proto: https for a secure one (its cookies would be Secure over HTTP)."""
    var = tmp_path / "var"
    var.mkdir()
    var.chmod(0o755)
    (var / "secret_key").write_text("an-old-key-" * 5)
    (var / "secret_key").chmod(0o644)
    stack = start_stack(REDIS_URL=redis_server.url, QUEUE_PREFIX="stackprivate")
    stack.wait_for_line(r"queueadmin is up")
    assert var.stat().st_mode & 0o777 == 0o700
    for name in ("secret_key", "admin_password", "db.sqlite3"):
        assert (var / name).stat().st_mode & 0o777 == 0o600, name

    forwarded = urllib.request.Request(stack.url("/login/"),
                                       headers={"X-Forwarded-Proto": "https"})
    with _opener().open(forwarded, timeout=10) as response:
        cookies = response.headers.get_all("Set-Cookie") or []
        assert response.headers["Cache-Control"] and "no-store" in response.headers[
            "Cache-Control"]
    assert any(c.startswith("csrftoken=") for c in cookies), cookies
    assert not any("secure" in c.lower() for c in cookies), cookies
    with _opener().open(stack.url("/static/core/console.css"), timeout=10) as response:
        assert response.headers["X-Frame-Options"] == "DENY"

    stack.process.send_signal(signal.SIGINT)
    assert stack.process.wait(30) == 0

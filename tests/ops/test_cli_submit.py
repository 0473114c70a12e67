"""`manage.py submit`: through call_command and through core.cli.submit.submit, against the
suite's redis-server under each test's own prefix."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.core.management import call_command
from django.core.management.base import CommandError

from core.cli.submit import submit
from core.queue import Lease, Queue, handlers, read
from core.stack.redis_server import RedisServer, free_port
from tests.conftest import keys_under

Submit = Callable[..., tuple[str, str]]
OFFERED = ["echo", "noop", "spark"]


@pytest.fixture(autouse=True)
def workers_announced(redis_client: redis.Redis, prefix: str) -> None:
    """The handlers a worker of queues "default" and "batch" would have announced."""
    for name in ("default", "batch"):
        handlers.announce(Queue(redis_client, name, prefix=prefix), "w1", OFFERED)


def written(client: redis.Redis, prefix: str) -> list[str]:
    """The keys a submit wrote: all of the test's keys but the workers' announcements (the
    zset of live announcements, and the announcing worker's hash)."""
    return [k for k in keys_under(client, prefix)
            if not k.endswith((":hw", ":worker:w1"))]


def via_command(*tasks: str, **options: Any) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    options.setdefault("handler", "noop")
    call_command("submit", *tasks, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def via_function(*tasks: str, **options: Any) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    options.setdefault("handler", "noop")
    submit(list(tasks), stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


@pytest.fixture(params=["command", "function"])
def run_submit(request: pytest.FixtureRequest) -> Submit:
    return via_command if request.param == "command" else via_function


def drain(q: Queue, n: int) -> list[Any]:
    """Lease and ack `n` tasks; their payloads in delivery order."""
    payloads = []
    deadline = time.monotonic() + 10
    while len(payloads) < n and time.monotonic() < deadline:
        for lease in q.dequeue("test-consumer", 100):
            payloads.append(lease.payload)
            q.ack(lease)
    return payloads


class Consumer(threading.Thread):
    """A background worker stand-in: leases tasks as they come and finishes each with
    `finish`, until it has handled `n` tasks."""

    def __init__(self, q: Queue, n: int, finish: Callable[[Queue, Lease], object]) -> None:
        super().__init__(daemon=True)
        self.q, self.n, self.finish = q, n, finish
        self.handled = 0
        self.errors: list[BaseException] = []

    def run(self) -> None:
        deadline = time.monotonic() + 20
        try:
            while self.handled < self.n and time.monotonic() < deadline:
                leases = self.q.dequeue("test-consumer", 10)
                if not leases:
                    time.sleep(0.02)
                for lease in leases:
                    time.sleep(0.05)  # long enough for the progress bar to see tasks move
                    self.finish(self.q, lease)
                    self.handled += 1
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.errors.append(exc)


# -- tasks in --------------------------------------------------------------------------------


def test_tasks_from_arguments_make_one_request_with_the_options_given(
    run_submit: Submit, django_queue: Queue
) -> None:
    out, err = run_submit(
        '{"n": 1}', "[1, 2]", "hello", "42",
        priority=70, concurrency=2, tenant="acme", handler="spark", max_attempts=5,
        request_id="r1",
    )

    assert out == "r1\n"
    assert err == ""
    info = read.request(django_queue, "r1")
    assert info is not None
    assert (info.state, info.total, info.priority, info.concurrency) == ("active", 4, 70, 2)
    assert (info.tenant, info.handler, info.max_attempts) == ("acme", "spark", 5)
    # The concurrency limit holds: only two of the four are handed out at once.
    assert len(django_queue.dequeue("w", 10)) == 2
    assert read.stats(django_queue).waiting_by_priority == {70: 2}


def test_a_bare_word_is_a_string_task_and_json_arguments_keep_their_type(
    run_submit: Submit, django_queue: Queue
) -> None:
    out, _ = run_submit('{"n": 1}', "[1, 2]", "hello", "42", "true", '"quoted"')

    rid = out.strip()
    assert len(rid) == 32  # generated
    assert drain(django_queue, 6) == [{"n": 1}, [1, 2], "hello", 42, True, "quoted"]
    assert django_queue.wait(rid, timeout=5) == "done"


def test_tasks_from_a_jsonl_file_skip_blank_lines_and_follow_the_arguments(
    run_submit: Submit, django_queue: Queue, tmp_path: Path
) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"chunk": 1}\n\n{"chunk": 2}\n  \n"three"\n', encoding="utf-8")

    out, _ = run_submit('{"chunk": 0}', file=str(path), request_id="file-1")

    assert out == "file-1\n"
    info = read.request(django_queue, "file-1")
    assert info is not None and info.total == 4
    assert drain(django_queue, 4) == [{"chunk": 0}, {"chunk": 1}, {"chunk": 2}, "three"]


def test_tasks_from_standard_input(django_queue: Queue) -> None:
    out = io.StringIO()
    submit(file="-", stdin=io.StringIO('{"a": 1}\n{"a": 2}\n'), handler="noop", stdout=out,
           stderr=io.StringIO())

    assert drain(django_queue, 2) == [{"a": 1}, {"a": 2}]
    assert out.getvalue().strip()


def test_resubmitting_an_id_changes_nothing_and_says_so(
    run_submit: Submit, django_queue: Queue
) -> None:
    run_submit("1", "2", request_id="again")

    out, err = run_submit("3", request_id="again")

    assert out == "again\n"
    assert "already exists" in err and "nothing was submitted" in err
    info = read.request(django_queue, "again")
    assert info is not None and info.total == 2
    assert read.stats(django_queue).waiting == 2


def test_the_queue_option_picks_the_queue(
    run_submit: Submit, django_queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    run_submit("1", queue="batch", request_id="b1")

    assert read.request(django_queue, "b1") is None
    batch = Queue(redis_client, "batch", prefix=prefix)
    info = read.request(batch, "b1")
    assert info is not None and info.total == 1


# -- waiting ---------------------------------------------------------------------------------


def test_wait_follows_the_request_to_done_with_a_progress_bar(
    run_submit: Submit, django_queue: Queue
) -> None:
    consumer = Consumer(django_queue, 3, lambda q, lease: q.ack(lease))
    consumer.start()

    out, err = run_submit("1", "2", "3", request_id="w1", wait=True, timeout=20)

    consumer.join(5)
    assert consumer.errors == []
    assert out == "w1\n"
    assert "3/3" in err  # the progress bar's final count
    info = read.request(django_queue, "w1")
    assert info is not None and (info.state, info.done) == ("done", 3)


def test_wait_on_a_request_that_ends_failed_is_an_error(
    run_submit: Submit, django_queue: Queue
) -> None:
    def fail_second(q: Queue, lease: Lease) -> None:
        if lease.payload == 2:
            q.fail(lease, "ValueError: bad input", retry=False)
        else:
            q.ack(lease)

    consumer = Consumer(django_queue, 3, fail_second)
    consumer.start()

    with pytest.raises(CommandError, match=r"request w2 ended failed: 2 of 3 tasks done, 1 dead"):
        run_submit("1", "2", "3", request_id="w2", wait=True, timeout=20)

    consumer.join(5)
    assert consumer.errors == []


def test_wait_gives_up_at_the_timeout_and_leaves_the_request_running(
    run_submit: Submit, django_queue: Queue
) -> None:
    started = time.monotonic()
    with pytest.raises(CommandError, match=r"timed out after 0.3s .* it keeps running"):
        run_submit("1", request_id="slow", wait=True, timeout=0.3)

    assert time.monotonic() - started < 5
    assert django_queue.state("slow") == "active"


def test_timeout_without_wait_is_refused_before_submitting(
    run_submit: Submit, django_queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    with pytest.raises(CommandError, match="--timeout applies only with --wait"):
        run_submit("1", timeout=5)
    assert written(redis_client, prefix) == []


# -- refusals: a clear message, and Redis untouched ------------------------------------------


def _big(n: int) -> str:
    return '"' + "x" * n + '"'


@pytest.mark.parametrize(
    ("tasks", "options", "message"),
    [
        (["1"], {"priority": 150}, r"priority must be between 0 and 99, got 150"),
        (["1"], {"priority": -1}, r"priority must be between 0 and 99"),
        (["1"], {"concurrency": 0}, r"concurrency must be between 1 and 1000000"),
        (["1"], {"request_id": "a:b"}, r"invalid request id 'a:b'"),
        (["1"], {"request_id": "x{q}"}, r"invalid request id 'x\{q\}'"),
        (["1"], {"tenant": "a b"}, r"invalid tenant 'a b'"),
        (["1"], {"queue": "q:1"}, r"invalid queue name 'q:1'"),
        (["{oops"], {}, r"argument 1 is not valid JSON"),
        (["1", '[1, 2'], {}, r"argument 2 is not valid JSON"),
        ([], {}, r"nothing to submit"),
        (["1", _big(70_000)], {}, r"argument 2: the task is 70002 bytes; a task may hold at most"),
        (["NaN"], {}, r"argument 1: NaN is not JSON \(JSON has no NaN or Infinity\); quote it"),
        (["1", '{"x": [Infinity]}'], {}, r"argument 2: Infinity is not JSON"),
        (["1", "[1e999]"], {}, r"argument 2: 1e999 is too large for a JSON number"),
        (["1", str(2**64)], {}, r"argument 2: the task payload is not JSON-serialisable"),
    ],
)
def test_bad_input_is_a_command_error_and_changes_nothing(
    run_submit: Submit,
    django_queue: Queue,
    redis_client: redis.Redis,
    prefix: str,
    tasks: list[str],
    options: dict[str, Any],
    message: str,
) -> None:
    with pytest.raises(CommandError, match=message):
        run_submit(*tasks, **options)
    assert written(redis_client, prefix) == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"a": 1}\n{"a": 2}\n{"a": \n{"a": 4}\n', r"tasks.jsonl, line 3: not valid JSON"),
        ('{"a": 1}\n\n[1, 2] trailing\n', r"tasks.jsonl, line 3: not valid JSON"),
        ('{"a": 1}\n' + _big(70_000) + "\n", r"tasks.jsonl line 2: the task is 70002 bytes"),
        ('{"a": 1}\n{"a": NaN}\n', r"tasks.jsonl, line 2: NaN is not JSON"),
        ('{"a": 1}\n\n[-Infinity]\n', r"tasks.jsonl, line 3: -Infinity is not JSON"),
        ("", r"nothing to submit"),
    ],
)
def test_a_bad_file_names_the_line_and_changes_nothing(
    run_submit: Submit,
    django_queue: Queue,
    redis_client: redis.Redis,
    prefix: str,
    tmp_path: Path,
    content: str,
    message: str,
) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(content, encoding="utf-8")

    with pytest.raises(CommandError, match=message):
        run_submit(file=str(path))
    assert written(redis_client, prefix) == []


def test_a_file_that_is_not_utf8_names_the_line(
    run_submit: Submit, django_queue: Queue, redis_client: redis.Redis, prefix: str,
    tmp_path: Path,
) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(b'{"a": 1}\n"caf\xe9"\n')

    with pytest.raises(CommandError, match=r"tasks.jsonl, line 2: not UTF-8"):
        run_submit(file=str(path))
    assert written(redis_client, prefix) == []


def test_a_missing_file_is_named(
    run_submit: Submit, django_queue: Queue, tmp_path: Path
) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(CommandError, match=rf"cannot read task file {missing}: No such file"):
        run_submit(file=str(missing))


def test_unreachable_redis_names_the_url_and_how_to_start_it(
    run_submit: Submit, django_queue: Queue, settings: Any, redis_client: redis.Redis,
    prefix: str,
) -> None:
    url = f"redis://:secret@127.0.0.1:{free_port()}/0"
    settings.REDIS_URL = url

    with pytest.raises(CommandError) as raised:
        run_submit("1")

    message = str(raised.value)
    assert f"cannot reach Redis at redis://:***@127.0.0.1:{url.rsplit(':', 1)[1]}" in message
    assert "secret" not in message
    assert "make run" in message and "REDIS_URL" in message
    assert "a stack started with QA_REDIS_PORT=N needs the same QA_REDIS_PORT here" in message
    assert written(redis_client, prefix) == []


def test_a_malformed_redis_url_is_a_command_error(run_submit: Submit, settings: Any) -> None:
    settings.REDIS_URL = "http://127.0.0.1:6379"
    with pytest.raises(CommandError, match=r"REDIS_URL 'http://127.0.0.1:6379' is not a Redis URL"):
        run_submit("1")


# -- from a shell: exit status and no traceback ----------------------------------------------


def _manage(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "QUEUE_PREFIX")}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=django_settings.BASE_DIR, env={**base, **env},
        capture_output=True, text=True, timeout=60,
    )


def test_from_a_shell_errors_exit_non_zero_without_a_traceback(
    redis_server: RedisServer, redis_client: redis.Redis, prefix: str
) -> None:
    down = _manage(
        ["submit", "1", "--handler", "noop"], REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"
    )
    bad = _manage(
        ["submit", "1", "--handler", "noop", "--priority", "100"], REDIS_URL=redis_server.url,
        QUEUE_PREFIX=prefix,
    )
    not_int = _manage(["submit", "1", "--priority", "high"], REDIS_URL=redis_server.url)

    assert down.returncode == 1 and "cannot reach Redis" in down.stderr
    assert bad.returncode == 2 and "priority must be between 0 and 99" in bad.stderr
    assert not_int.returncode == 2 and "invalid int value: 'high'" in not_int.stderr
    for done in (down, bad, not_int):
        assert "Traceback" not in done.stderr
        assert done.stdout == ""
    assert written(redis_client, prefix) == []


def test_from_a_shell_wait_on_a_failing_request_exits_non_zero(
    redis_server: RedisServer, redis_client: redis.Redis, prefix: str
) -> None:
    q = Queue(redis_client, "default", prefix=prefix)
    consumer = Consumer(q, 1, lambda q, lease: q.fail(lease, "boom", retry=False))
    consumer.start()

    done = _manage(
        ["submit", "1", "--handler", "noop", "--request-id", "sh1", "--wait", "--timeout", "30"],
        REDIS_URL=redis_server.url, QUEUE_PREFIX=prefix,
    )

    consumer.join(5)
    assert done.returncode == 1
    assert done.stdout == "sh1\n"
    assert "request sh1 ended failed" in done.stderr and "Traceback" not in done.stderr


# -- handlers: only one a worker announced, unless told otherwise ----------------------------


def test_an_unknown_handler_is_refused_with_the_ones_the_workers_run(
    run_submit: Submit, django_queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    with pytest.raises(
        CommandError,
        match=r"no worker of queue default runs handler 'sparkk'; its workers run: echo, noop, "
        r"spark\. Start a worker that registers it .* or pass --any-handler",
    ):
        run_submit("1", handler="sparkk")
    assert written(redis_client, prefix) == []


def test_a_missing_handler_is_refused_with_the_ones_the_workers_run(
    run_submit: Submit, django_queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    with pytest.raises(CommandError, match=r"give --handler NAME.*: echo, noop, spark$"):
        run_submit("1", handler=None)
    with pytest.raises(CommandError, match=r"give --handler NAME"):
        run_submit("1", handler=None, any_handler=True)
    assert written(redis_client, prefix) == []


def test_a_queue_no_worker_announced_to_says_so(
    run_submit: Submit, django_queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    with pytest.raises(CommandError, match=r"no worker of it has announced any handler yet"):
        run_submit("1", handler="noop", queue="fresh")
    assert written(redis_client, prefix) == []


def test_any_handler_submits_to_a_handler_no_worker_announced_yet_without_a_warning(
    run_submit: Submit, django_queue: Queue, recwarn: pytest.WarningsRecorder
) -> None:
    out, err = run_submit("1", handler="later", any_handler=True, request_id="r")

    assert (out, err) == ("r\n", "")
    info = read.request(django_queue, "r")
    assert info is not None and (info.handler, info.total) == ("later", 1)
    assert [str(w.message) for w in recwarn] == []


def test_from_a_shell_an_unknown_handler_exits_non_zero_and_any_handler_goes_through(
    redis_server: RedisServer, redis_client: redis.Redis, prefix: str
) -> None:
    env = {"REDIS_URL": redis_server.url, "QUEUE_PREFIX": prefix}
    refused = _manage(["submit", "1", "--handler", "nope"], **env)
    accepted = _manage(["submit", "1", "--handler", "nope", "--any-handler",
                        "--request-id", "a1"], **env)

    assert refused.returncode == 2 and refused.stdout == ""
    assert "runs handler 'nope'; its workers run: echo, noop, spark" in refused.stderr
    assert (accepted.returncode, accepted.stdout, accepted.stderr) == (0, "a1\n", "")

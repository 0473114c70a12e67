"""What tracing costs (issue 38, item 4): the queue benchmark's `tracing` measure
(bench/bench_queue.py --only tracing), or alone:

    .venv/bin/python bench/bench_tracing.py [--tasks 6000] [--rounds 2]

One-task requests processed by one `runworker` process, in turns on one redis-server:
- off:     submitted without a trace context, the worker's tracing off (as before issue 38);
- carried: submitted with a traceparent, the worker's tracing off (the engine keeps and hands
           the context: Redis's share of it);
- on:      submitted with one, the worker's tracing on from the OTEL_* settings, its spans
           exported over OTLP/HTTP to a sink in this process that decodes each request and
           answers 200 (the runs' spans written as OTLP by core/tracing/otlp.py and posted
           by OpenTelemetry's exporter: encoding and HTTP included).
Per task: the worker's CPU (its heartbeat process's included; read once it has exited, so that
the spans it exports at its stop count too), Redis's CPU, the time in the engine's functions,
the round trips (FCALL + BLPOP) and the commands (the least of the runs).
And, in this process, per span (this thread's CPU): the task path alone (a run's
TaskSpans.start + finish); building SDK spans for other processors; writing OTLP bytes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_queue import Run, run_workers  # noqa: E402
from core.queue import Lease, Queue, UnknownHandlerWarning  # noqa: E402
from core.queue.connect import Client, connect  # noqa: E402
from core.stack.redis_server import RedisServer, start_redis  # noqa: E402

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
MODES = ("off", "carried", "on")


class _Sink(BaseHTTPRequestHandler):
    spans = 0  # spans received, all runs together

    def do_POST(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        body = ExportTraceServiceRequest.FromString(
            self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        _Sink.spans += sum(len(s.spans) for r in body.resource_spans for s in r.scope_spans)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def otlp_sink() -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1/traces"


def bench_tracing(server: RedisServer, client: Client, prefix: str, tasks: int,
                  rounds: int = 2) -> dict[str, Any]:
    """The three modes in turns, `rounds` runs each (see the module's docstring)."""
    sink, endpoint = otlp_sink()
    off_env = {"OTEL_TRACES_EXPORTER": "", "OTEL_EXPORTER_OTLP_ENDPOINT": "",
               "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ""}
    envs = {"off": off_env, "carried": off_env,
            "on": off_env | {"OTEL_TRACES_EXPORTER": "otlp",
                             "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint}}
    runs: dict[str, list[Run]] = {m: [] for m in MODES}
    try:
        for r in range(rounds):
            for mode in MODES if r % 2 == 0 else MODES[::-1]:
                q = Queue(client, f"tracing-{mode}-{r}", prefix=prefix)
                tp = "" if mode == "off" else TP
                for _ in range(tasks):
                    q.submit([None], handler="noop", traceparent=tp)
                runs[mode].append(run_workers(server, client, q, tasks, 1, env_extra=envs[mode],
                                              cpu_at_exit=True))
    finally:
        sink.shutdown()
    out: dict[str, Any] = {}
    for mode, measured in runs.items():
        out[f"tracing_{mode}_one_task_requests_per_s"] = round(statistics.median(
            run.tasks / run.elapsed for run in measured))
        for key, value in (("worker_cpu_us", lambda x: x.worker_cpu_us),
                           ("redis_cpu_us", lambda x: x.redis_cpu_us),
                           ("fcall_us", lambda x: x.script_us),
                           ("round_trips", lambda x: x.calls), ("commands", lambda x: x.commands)):
            out[f"tracing_{mode}_{key}_per_task"] = round(min(
                value(run) / run.tasks for run in measured), 2)
    # Every run's span reached the sink (none dropped by a full batch queue).
    out["tracing_on_spans_exported_per_task"] = round(
        _Sink.spans / (tasks * len(runs["on"])), 3)
    out["tracing_on_worker_cpu_us_per_task_added"] = round(
        out["tracing_on_worker_cpu_us_per_task"] - out["tracing_off_worker_cpu_us_per_task"], 2)
    return out | task_path_us()


def task_path_us(n: int = 20_000) -> dict[str, float]:
    """In this process, this thread's CPU: a run's start + finish; building the spans as the
    SDK's ReadableSpans and handing them to a processor that keeps none (TaskSpans.flush:
    the way of any processor but OTLP's); writing the same runs' spans as one OTLP request's
    bytes (the way of OTLP/HTTP batch processors, core/tracing/otlp.py)."""
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    from core.tracing.otlp import Envelope, SpanWriter
    from core.tracing.runs import TaskSpans

    provider = TracerProvider()
    provider.add_span_processor(SpanProcessor())  # on_end does nothing
    spans = TaskSpans(provider, "bench")
    spans._thread = threading.current_thread()  # no building thread: flush() below does it
    leases = [Lease(f"r{i}/1-{i}/1", 1, None, "noop", 30_000, TP, 3) for i in range(n)]
    start, finish = spans.start, spans.finish
    for lease in leases[:1000]:  # warm up
        finish(start("q", lease))
    spans.flush()
    t0 = time.thread_time()
    for lease in leases:
        finish(start("q", lease))
    t1 = time.thread_time()
    records = list(spans._records)
    spans.flush()
    t2 = time.thread_time()
    writer = SpanWriter("bench")
    envelope = Envelope(provider.resource, InstrumentationScope("queueadmin"))
    t3 = time.thread_time()
    envelope.request([writer.span(run) for run in records])
    t4 = time.thread_time()
    return {"tracing_task_path_us": round((t1 - t0) * 1e6 / n, 2),
            "tracing_span_build_us": round((t2 - t1) * 1e6 / n, 2),
            "tracing_span_write_us": round((t4 - t3) * 1e6 / n, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=6_000, help="one-task requests per run")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each mode, in turns")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=UnknownHandlerWarning)  # workers start later
    with tempfile.TemporaryDirectory(prefix="qa-bench-") as tmp:
        server = start_redis(Path(tmp), appendonly=True, fsync="everysec")
        try:
            out = bench_tracing(server, connect(server.url, cluster=False), "bt", args.tasks,
                                args.rounds)
        finally:
            server.stop()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

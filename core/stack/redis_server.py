"""Start and stop a project-managed `redis-server` (the embedded default stack and the tests).

Stopped by PID: nothing here ever touches a Redis it did not start.
"""

from __future__ import annotations

import contextlib
import random
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.procs import free_port, port_free

# Redis's appendfsync values. "always": the append-only file is fsynced before a write is
# answered, so an acknowledged write survives a crash of redis-server or of the machine;
# "everysec": once a second, so a crash can lose up to about a second of acknowledged writes.
FSYNC_MODES = ("always", "everysec", "no")

# Redis (6.2+) allocates a new stream's first node at stream-node-max-bytes, 4 KB by default,
# whatever it holds: a waiting request of one task took 5.4 KB, its stream 5 KB of that. At
# 1 KB it takes 2.3 KB, and a request of 100,000 tasks 76 bytes a task instead of 73; leasing
# costs the same (measured for issue 6). Operators of their own Redis can set the same.
STREAM_NODE_MAX_BYTES = "1024"


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too; Redis needs both.

    Both below the kernel's ephemeral range (32768 and up on Linux), which every outgoing
    connection and every bind to port 0 draws from: a port found free there could be taken
    by such a one before redis-server binds it (seen when a cluster started beside a test's
    connections)."""
    pick = random.SystemRandom()  # not the random module's: tests seed it, the same in each
    for _ in range(200):
        port = pick.randint(10_000, 22_000)
        if port_free(port) and port_free(port + 10_000):
            return port
    raise RuntimeError("no free port pair (port, port + 10000) found for a cluster node")


@dataclass
class RedisServer:
    """A redis-server child process with its data in `data_dir`."""

    port: int
    data_dir: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, *, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM lets it write its append-only file) and wait for it."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_redis(
    data_dir: Path | str,
    *,
    port: int | None = None,
    appendonly: bool = True,
    fsync: str = "always",
    extra: list[str] | None = None,
    ready_timeout: float = 10.0,
    pass_fds: Sequence[int] = (),
) -> RedisServer:
    """Start redis-server on 127.0.0.1:`port` (a free one by default) and wait until it answers.
    `pass_fds` stay open in it (a lock it must hold for as long as it runs)."""
    if fsync not in FSYNC_MODES:
        raise ValueError(f"appendfsync must be one of {', '.join(FSYNC_MODES)}, not {fsync!r}")
    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError("redis-server is not installed (Debian: apt-get install redis-server)")
    data = Path(data_dir)
    data.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    args = [
        exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data.resolve()),
        "--save", "", "--appendonly", "yes" if appendonly else "no", "--appendfsync", fsync,
        "--daemonize", "no", "--protected-mode", "yes",
        "--logfile", str((data / "redis.log").resolve()),
        "--stream-node-max-bytes", STREAM_NODE_MAX_BYTES, *(extra or []),
    ]
    # Its own session: a Ctrl-C meant for the supervisor must not stop Redis before the
    # workers have released their tasks; whoever started it stops it, by PID.
    proc = subprocess.Popen(
        args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True,
        pass_fds=tuple(pass_fds),
    )
    server = RedisServer(port, data, proc)
    _wait_answering(server, ready_timeout)
    return server


def _wait_answering(server: RedisServer, ready_timeout: float) -> None:
    """Until the started server answers PING; killed and a RuntimeError if it exits first
    (with the end of its log) or does not answer in time."""
    port, data, proc = server.port, server.data_dir, server.process
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log = (
                (data / "redis.log").read_text(errors="replace")[-2000:]
                if (data / "redis.log").exists()
                else ""
            )
            raise RuntimeError(f"redis-server exited with {proc.returncode} on port {port}:\n{log}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.02)
    server.stop(sig=signal.SIGKILL)
    raise RuntimeError(f"redis-server did not answer on port {port} within {ready_timeout}s")

@dataclass
class RedisCluster:
    """A Redis Cluster of `servers` (one master each, no replicas) made for tests."""

    servers: list[RedisServer]

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", s.port) for s in self.servers]

    def stop(self) -> None:
        for s in self.servers:
            s.stop()


def _start_node(data_dir: Path, node_args: list[str], tries: int = 5) -> RedisServer:
    """A cluster node on a free port pair, another pair if someone took this one meanwhile."""
    for attempt in range(tries):
        try:
            server = start_redis(data_dir, port=free_cluster_port(), appendonly=False,
                                 extra=node_args)
        except RuntimeError as e:
            if "Address already in use" not in str(e) or attempt == tries - 1:
                raise
        else:
            # The one that answered is ours, not another's that took the port first (ours
            # then exits, but may not have yet when the other answered).
            if _process_id(server.port) == server.pid:
                return server
            server.stop(sig=signal.SIGKILL)
        (data_dir / "nodes.conf").unlink(missing_ok=True)  # the node id of the one that failed
    raise RuntimeError(f"no cluster node of ours answered in {tries} tries: each port taken "
                       "by another server meanwhile")


def _process_id(port: int) -> int | None:
    """The process id of the redis-server answering on `port` (INFO server), if one does."""
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1) as s:
        s.sendall(b"INFO server\r\n")
        s.settimeout(1)
        reply = b""
        while b"process_id:" not in reply or not reply.endswith(b"\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
        found = re.search(rb"process_id:(\d+)", reply)
        return int(found.group(1)) if found else None
    return None


def start_cluster(
    data_dir: Path | str, *, masters: int = 3, ready_timeout: float = 30.0
) -> RedisCluster:
    """Start `masters` cluster-enabled redis-servers, join them with `redis-cli --cluster
    create`, and wait until every node reports cluster_state:ok."""
    root = Path(data_dir)
    servers: list[RedisServer] = []
    node_args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", "5000"]
    try:
        for i in range(masters):
            servers.append(_start_node(root / f"node{i}", node_args))
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("redis-cli is not installed (Debian: apt-get install redis-tools)")
        subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{s.port}" for s in servers),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=ready_timeout,
        )
        deadline = time.monotonic() + ready_timeout
        while True:
            states = [
                subprocess.run([cli, "-p", str(s.port), "cluster", "info"],
                               capture_output=True, text=True, timeout=5).stdout
                for s in servers
            ]
            if all("cluster_state:ok" in st for st in states):
                return RedisCluster(servers)
            if time.monotonic() > deadline:
                raise RuntimeError("Redis Cluster did not reach cluster_state:ok")
            time.sleep(0.1)
    except BaseException:
        for s in servers:
            s.stop()
        raise

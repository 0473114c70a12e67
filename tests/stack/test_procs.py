"""core.procs.free_port: ports for the servers the stack and the tests start, taken where no
other process is handed them meanwhile."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from core import procs


def test_free_ports_are_below_the_ephemeral_range_distinct_and_bindable() -> None:
    low = procs._ephemeral_low()
    if low - procs.PORTS_SPAN < 1024:
        pytest.skip(f"no room below this machine's ephemeral ports (from {low})")
    ports = [procs.free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(low - procs.PORTS_SPAN <= p < low for p in ports), (low, ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))


def test_a_port_handed_out_is_not_handed_out_again_until_its_reservation_is_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process (or this one) asking within RESERVED_S gets another port: a server
    given the first one has bound it by then."""
    monkeypatch.setattr(procs, "PORTS_DIR", tmp_path / "ports")
    assert procs._reserve(23456)
    assert not procs._reserve(23456)
    old = time.time() - procs.RESERVED_S - 1
    os.utime(tmp_path / "ports" / "23456", (old, old))
    assert procs._reserve(23456)
    assert not procs._reserve(23456)

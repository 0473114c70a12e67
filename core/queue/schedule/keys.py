"""The key names of a queue's recurring schedules: made here, used only by store.py and the
scripts in lua/. They carry the queue's hash tag, so a schedule's keys and its requests'
keys are on one shard (the claim script reads the last run's request hash)."""

from __future__ import annotations

from dataclasses import dataclass

from core.queue.keys import QueueKeys


@dataclass(frozen=True)
class ScheduleKeys:
    """`P:{Q}:sched:...` for queue Q under prefix P."""

    queue: QueueKeys

    @property
    def due(self) -> str:
        """Zset: schedule name -> when a scheduler should look at it next (ms): its next
        slot, or sooner while a claimed slot is not confirmed submitted. Paused and ended
        schedules are not in it."""
        return self.queue.base + "sched:due"

    @property
    def names(self) -> str:
        """Zset, every score 0: every schedule's name, listed in lexical order."""
        return self.queue.base + "sched:names"

    def schedule(self, name: str) -> str:
        """Hash: spec (JSON), version, next, paused, pending, last_slot, last_rids, counters."""
        return f"{self.queue.base}sched:s:{name}"

    def runs(self, name: str) -> str:
        """List, newest first, capped: the schedule's last slots (fired, skipped, failed)."""
        return f"{self.queue.base}sched:s:{name}:runs"

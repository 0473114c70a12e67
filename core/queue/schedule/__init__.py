"""Time: recurring schedules (issue 19) — and delayed requests' promotion.

Recurring schedules live in Redis beside their queue (keys.py), are defined and changed
through store.py (the only code that touches their keys), and are fired by any number of
scheduler loops (scheduler.py): each slot's request id is derived from the schedule and the
slot, and a slot is claimed atomically before it is submitted, so it fires once whatever
races. spec.py holds a schedule's definition, its validation and its time arithmetic.
"""

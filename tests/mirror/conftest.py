"""The mirror's tests (core/mirror): the queues' streams into the database, also killed
mid-batch and through Redis outages; tests/mirror_support.py compares rows with Redis."""

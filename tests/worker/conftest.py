"""The worker runtime's tests (core/worker): real `runworker` processes and in-process
workers against the root conftest's redis-server; handlers from tests/handlers.py."""

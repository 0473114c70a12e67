"""The engine's tests (core/queue): a real redis-server (and Redis Cluster) from the root
conftest, queues on an injected clock (`queue`) or on the server's (`live_queue`); no Django.
The state-machine test (test_stateful.py, with tests/engine_model.py) drives the invariants."""

"""The embedded default stack on one machine (`queueadmin runstack`, what `make run` runs):
the supervisor (supervisor.py), the project's own redis-server (redis_server.py) and the lock
that keeps one stack per data directory (lock.py)."""

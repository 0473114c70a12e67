"""The data pipeline on PySpark (DESIGN.md §5): a big input split into chunks on a worker,
each chunk transformed by the workers under the queue's priorities, concurrency limit and fair
share, the parts combined once when the last chunk is done. See docs/pipeline.md.

Importing it imports no PySpark: a session is made at a worker's first data task
(spark_sessions.py).
"""

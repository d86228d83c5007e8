"""The main job, ``python -m examples.demo`` (``make demo``).

Files -> Spark Structured Streaming -> the broker -> an effectively-once consumer ->
SQLite, with the Spark query and the broker killed on the way, then a summary. It lives
outside the ``dedup_broker`` package because it is a user of the broker and of the Spark
connectors, not a part of either.
"""

"""A streaming pipeline on the ``dedup-broker`` data source: topic A -> a transformation ->
topic B, in its own process so that tests can ``kill -9`` the driver mid-batch and start it
again from its checkpoint.

Reads ``--source`` (at most ``--max-per-batch`` messages per micro-batch), appends
``-done`` to each value, writes to ``--target`` in sequence mode, processes everything
available, then exits.

``--slow-prefix TEXT --slow-ms N``: rows whose source value starts with TEXT take N ms each
in the transformation, so that a caller can kill the query while the batch holding them is
partly written; with ``--slow-flag FILE`` the task transforming them writes its process id
to FILE, so that a caller can find (and kill) the executor running it.

``--master``: ``local[N]`` (default ``local[2]``) or a standalone cluster's
``spark://host:port`` (see ``connectors.spark_cluster``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from connectors.datasource import FORMAT, register
from connectors.spark_cluster import spark_session


def _derived(slow_prefix: str | None, slow_ms: int, slow_flag: str | None) -> Any:
    """``value-done``; slowly for values starting with ``slow_prefix``, telling
    ``slow_flag`` which process does it."""
    from pyspark.sql import functions as f
    from pyspark.sql.types import BinaryType

    def derive(value: bytes) -> bytes:
        text = value.decode()
        if slow_prefix is not None and text.startswith(slow_prefix):
            if slow_flag is not None:
                _tell_pid(Path(slow_flag))
            time.sleep(slow_ms / 1000)
        return f"{text}-done".encode()

    return f.udf(derive, BinaryType()).asNondeterministic()(f.col("value"))


def _tell_pid(flag: Path) -> None:
    """Write this process's id to ``flag`` unless it holds it already."""
    pid = str(os.getpid())
    try:
        if flag.read_text() == pid:
            return
    except OSError:
        pass
    flag.write_text(pid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.demo.datasource_job")
    parser.add_argument("--service-url", required=True)
    parser.add_argument("--admin-url", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--name", required=True, help="producer-name prefix of the sink")
    parser.add_argument("--max-per-batch", type=int, default=100)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--slow-prefix")
    parser.add_argument("--slow-ms", type=int, default=0)
    parser.add_argument("--slow-flag", help="file the slow task writes its process id to")
    args = parser.parse_args(argv)

    spark = spark_session(args.master, "dedup-broker-datasource-job")
    # Rows reach the Python writer in Arrow batches: small ones keep a batch's rows moving
    # (and make a kill in the middle of a micro-batch leave part of it written).
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    register(spark)
    source = (
        spark.readStream.format(FORMAT)
        .option("serviceUrl", args.service_url)
        .option("adminUrl", args.admin_url)
        .option("topic", args.source)
        .option("maxOffsetsPerTrigger", str(args.max_per_batch))
        .load()
    )
    derived = source.select(
        "key", _derived(args.slow_prefix, args.slow_ms, args.slow_flag).alias("value")
    )
    query = (
        derived.writeStream.format(FORMAT)
        .option("serviceUrl", args.service_url)
        .option("topic", args.target)
        .option("name", args.name)
        .option("checkpointLocation", args.checkpoint)
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    print(f"query finished after batch {query.lastProgress['batchId']}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The demo's Spark Structured Streaming query: input files -> ``PulsarSink`` -> a topic.

Runs as its own process (``python -m examples.demo.stream_job ...``) so that the demo
and the tests can ``kill -9`` the driver mid-batch and start it again from its checkpoint.
Reads every file available in ``--input`` (``availableNow``: one file per micro-batch),
publishes each line as one message in sequence mode, prints one line per batch and exits.

``--pause-at ID --pause-flag FILE``: while FILE exists, the task holding the row with
that id publishes the rows before it, writes its process id to ``FILE.paused`` and then
waits, so that a caller can kill the query (or the executor running that task) at a known
point in the middle of a batch.

``--master``: ``local[N,F]`` (default ``local[2,4]``) or a standalone cluster's
``spark://host:port`` (see ``connectors.spark_cluster``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from connectors.sink import PulsarSink, SinkResult
from connectors.spark_cluster import spark_session

PAUSE_SECONDS = 600.0


def write_input_files(directory: Path, name: str, chunks: list[list[str]]) -> None:
    """Each chunk as one JSON-lines file ``name.format(index)``, in that order.

    The query reads the oldest file first, and files written within one tick of the
    file system's clock would be read in any order: each file gets a modification time
    one second after the one before.
    """
    directory.mkdir(parents=True, exist_ok=True)
    first = time.time() - len(chunks)
    for index, chunk in enumerate(chunks):
        path = directory / name.format(index)
        path.write_text("\n".join(chunk) + "\n")
        os.utime(path, (first + index, first + index))


def _paused_value(pause_at: int, flag: str) -> Any:
    """Identity on the line; blocks at the row whose id is ``pause_at`` while ``flag`` exists."""
    from pyspark.sql import functions as f
    from pyspark.sql.types import StringType

    needle = f'"id": {pause_at},'

    def value(line: str) -> str:
        if needle in line and os.path.exists(flag):
            Path(flag + ".paused").write_text(str(os.getpid()))
            deadline = time.monotonic() + PAUSE_SECONDS
            while os.path.exists(flag) and time.monotonic() < deadline:
                time.sleep(0.2)
        return line

    return f.udf(value, StringType()).asNondeterministic()(f.col("value"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.demo.stream_job")
    parser.add_argument("--input", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--service-url", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--name", required=True, help="producer-name prefix of the sink")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--master", default="local[2,4]")
    parser.add_argument("--send-timeout-ms", type=int, default=30_000)
    parser.add_argument("--pause-at", type=int)
    parser.add_argument("--pause-flag")
    args = parser.parse_args(argv)

    from pyspark.sql import functions as f

    spark = spark_session(args.master, "dedup-broker-demo")
    value = f.col("value")
    if args.pause_at is not None and args.pause_flag:
        value = _paused_value(args.pause_at, args.pause_flag)
    sink = PulsarSink(
        args.service_url,
        args.topic,
        name=args.name,
        value=value,
        order_by=[f.get_json_object("value", "$.id").cast("long")],
        num_partitions=args.partitions,
        producer=_producer_settings(args.send_timeout_ms),
    )

    def publish(batch: Any, batch_id: int) -> None:
        result = sink(batch, batch_id)
        _report(result)

    lines = spark.readStream.option("maxFilesPerTrigger", 1).text(args.input)
    query = (
        lines.writeStream.foreachBatch(publish)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print("query finished", flush=True)
    spark.stop()
    return 0


def _producer_settings(send_timeout_ms: int) -> Any:
    from connectors.sink_options import ProducerSettings

    return ProducerSettings(send_timeout_ms=send_timeout_ms)


def _report(result: SinkResult) -> None:
    print(
        f"batch {result.batch_id}: rows {result.rows}, stored {result.stored}, "
        f"already stored {result.replayed} ({result.seconds:.1f}s)",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())

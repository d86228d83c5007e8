"""``python -m examples.demo [--messages N] [--spark-master URL]``: run the demo pipeline and
print its summary.

Spark runs in local mode unless ``--spark-master`` (or ``DEMO_SPARK_MASTER``) names a
standalone cluster, ``spark://host:port``, that shares this machine's file system (the
input files, the checkpoint): ``python -m connectors.spark_cluster`` starts one.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from dedup_broker.errors import DevServerError
from examples.demo.pipeline import run_demo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.demo",
        description="Start Kafka, Redis and the broker, run the demo pipeline, stop.",
    )
    parser.add_argument("--messages", type=int, default=50_000, help="rows to send through")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    parser.add_argument(
        "--spark-master",
        default=os.environ.get("DEMO_SPARK_MASTER") or None,
        help="spark://host:port of a standalone cluster (default: DEMO_SPARK_MASTER, else "
        "local mode)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return run_demo(args.messages, args.spark_master)
    except DevServerError as exc:
        # An expected condition (nothing to provision from, a port taken, a server that
        # does not start): its message says what to do, a traceback would only hide it.
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

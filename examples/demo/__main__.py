"""``python -m examples.demo [--messages N]``: run the demo pipeline and print its summary."""

from __future__ import annotations

import argparse
import logging
import sys

from examples.demo.pipeline import run_demo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.demo",
        description="Start Kafka, Redis and the broker, run the demo pipeline, stop.",
    )
    parser.add_argument("--messages", type=int, default=50_000, help="rows to send through")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return run_demo(args.messages)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

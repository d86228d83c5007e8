"""The ``dedup-broker`` command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import ConfigError, DevServerError


def _config(args: argparse.Namespace) -> BrokerConfig:
    overrides = dict(pair.split("=", 1) for pair in args.set or [])
    return BrokerConfig.load(args.config, overrides=overrides)


def _serve(args: argparse.Namespace) -> int:
    from dedup_broker.app.broker_app import serve

    serve(_config(args))
    _exit_without_waiting_for_blocked_threads(0)
    return 0


def _exit_without_waiting_for_blocked_threads(code: int) -> None:
    """After a finished shutdown, exit even if a worker thread is still blocked in a Kafka
    call (Kafka unreachable): such calls cannot be interrupted and would hold the
    interpreter's exit for their whole timeout."""
    if any(t.is_alive() and not t.daemon for t in threading.enumerate()[1:]):
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _show_config(args: argparse.Namespace) -> int:
    config = _config(args)
    from dedup_broker.app.broker_app import validate_settings

    validate_settings(config)
    print(json.dumps(config.as_pulsar_names(), indent=2, sort_keys=True))
    return 0


def _worker(args: argparse.Namespace) -> int:
    from prometheus_client import disable_created_metrics

    from dedup_broker.app.deletion_worker import run_worker
    from system_topics.worker_metrics import WorkerMetrics, serve_metrics

    config = _config(args)
    # /metrics shows the counters only, without a ``_created`` timestamp series each.
    disable_created_metrics()  # type: ignore[no-untyped-call]
    metrics = WorkerMetrics()
    server = serve_metrics(metrics, config.bind_address, config.deletion_worker_web_service_port)
    logging.getLogger(__name__).info(
        "deletion worker /metrics on %s:%d", config.bind_address, server.server_port
    )

    async def work_until_signalled() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_worker(config, metrics, stop)

    try:
        asyncio.run(work_until_signalled())
    finally:
        server.shutdown()
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from dedup_broker.app.deletion_worker import run_doctor

    report = run_doctor(_config(args))
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


def _add_deletion_commands(commands: Any, config_options: Callable[[Any], None]) -> None:
    worker = commands.add_parser(
        "deletion-worker", help="delete ledgers named by __ledger_deletion intents (PIP-186)"
    )
    config_options(worker)
    worker.set_defaults(func=_worker)
    doctor = commands.add_parser(
        "doctor", help="list orphaned or missing ledger topics and offloaded copies"
    )
    config_options(doctor)
    doctor.set_defaults(func=_doctor)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dedup-broker",
        description="A Pulsar-protocol broker on Kafka with guaranteed deduplication.",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    commands = parser.add_subparsers(dest="command", required=True)

    def config_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("-c", "--config", help="a broker.conf-style key=value file")
        sub.add_argument(
            "--set",
            action="append",
            metavar="KEY=VALUE",
            help="override one setting (Pulsar name, e.g. brokerServicePort=6651)",
        )

    serve = commands.add_parser("serve", help="run the broker")
    config_options(serve)
    serve.set_defaults(func=_serve)

    show = commands.add_parser("config", help="print the effective configuration")
    config_options(show)
    show.set_defaults(func=_show_config)

    from dedup_broker.app.standalone import add_standalone_command
    from dedup_broker.devservers.cli import add_dev_commands
    from dedup_broker.security.tokens import add_tokens_command

    add_standalone_command(commands, config_options)
    add_dev_commands(commands)
    _add_deletion_commands(commands, config_options)
    add_tokens_command(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        result: int = args.func(args)
        return result
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    except DevServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

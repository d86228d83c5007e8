"""``dedup-broker deletion-worker`` and ``dedup-broker doctor``."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dedup_broker.config import BrokerConfig

if TYPE_CHECKING:
    from system_topics.worker import DeletionWorker

log = logging.getLogger(__name__)


def _config(args: argparse.Namespace) -> BrokerConfig:
    overrides = dict(pair.split("=", 1) for pair in args.set or [])
    return BrokerConfig.load(args.config, overrides=overrides)


def _worker(args: argparse.Namespace) -> int:
    from prometheus_client import disable_created_metrics

    from system_topics.worker import DeletionWorker
    from system_topics.worker_metrics import serve_metrics

    config = _config(args)
    # /metrics shows the counters only, without a ``_created`` timestamp series each.
    disable_created_metrics()  # type: ignore[no-untyped-call]
    worker = DeletionWorker(config)
    server = serve_metrics(
        worker.metrics, config.bind_address, config.deletion_worker_web_service_port
    )
    log.info("deletion worker /metrics on %s:%d", config.bind_address, server.server_port)
    try:
        asyncio.run(_work_until_signalled(worker))
    finally:
        server.shutdown()
    return 0


async def _work_until_signalled(worker: DeletionWorker) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await worker.run(stop)


def _doctor(args: argparse.Namespace) -> int:
    from system_topics.doctor import check

    report = check(_config(args))
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


def add_commands(commands: Any, config_options: Callable[[argparse.ArgumentParser], None]) -> None:
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

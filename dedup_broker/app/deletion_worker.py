"""The deletion worker's composition root (``dedup-broker deletion-worker``, ``doctor``).

As ``broker_app.py`` wires a broker, this module builds what a deletion worker works with
(the ledger catalog, the owners directory, the tiered storage, the group consumer, the
producer of RETRY and DLQ copies, its ``/metrics``) and hands it to
``system_topics.worker.DeletionWorker``; the doctor gets the same collaborators.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from confluent_kafka import Consumer

from dedup_broker.cluster.owners import TopicOwners
from dedup_broker.config import BrokerConfig
from dedup_broker.storage.kafka.producer import SharedProducer
from dedup_broker.storage.offload.filesystem import offloader_from_config
from dedup_broker.storage.service.catalog import KafkaLedgerCatalog
from system_topics.checks import IntentChecker
from system_topics.doctor import inspect
from system_topics.lag import group_lag
from system_topics.topics import DeletionTopics
from system_topics.worker import DeletionWorker, worker_consumer_settings
from system_topics.worker_metrics import WorkerMetrics

log = logging.getLogger(__name__)


async def run_worker(config: BrokerConfig, metrics: WorkerMetrics, stop: asyncio.Event) -> None:
    """Build a deletion worker, work intents until ``stop`` is set, close what was built."""
    catalog = KafkaLedgerCatalog(config)
    owners = TopicOwners(config)
    producer = SharedProducer(config, asyncio.get_running_loop())
    checker = IntentChecker(config, catalog, owners, offloader_from_config(config))
    try:
        topics = DeletionTopics.from_config(config)
        consumer = Consumer(worker_consumer_settings(config, topics))
        lag = functools.partial(group_lag, config.kafka_connection(), topics)
        await DeletionWorker(config, consumer, checker, producer, metrics, lag).run(stop)
    finally:
        await checker.close()
        await producer.close()
        await catalog.close()
        await owners.close()


async def doctor_report(config: BrokerConfig) -> dict[str, Any]:
    """The consistency report of ``dedup-broker doctor`` (``system_topics/doctor.py``)."""
    catalog = KafkaLedgerCatalog(config)
    owners = TopicOwners(config)
    try:
        return await inspect(config, catalog, owners, offloader_from_config(config))
    finally:
        await catalog.close()
        await owners.close()


def run_doctor(config: BrokerConfig) -> dict[str, Any]:
    """:func:`doctor_report` on a loop of its own (blocking)."""
    return asyncio.run(doctor_report(config))

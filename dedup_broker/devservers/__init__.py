"""Real Kafka, Redis and PostgreSQL servers for tests, demos and development, on any machine.

``provide_kafka()`` / ``provide_redis()`` pick an existing server, a container or a native
process (see ``provision``); ``provide_postgres()`` an existing server or a native one;
``NativeKafka`` / ``NativeRedis`` / ``NativePostgres`` are the process launchers.
"""

from __future__ import annotations

from dedup_broker.devservers.kafka import NativeKafka
from dedup_broker.devservers.naming import unique_name
from dedup_broker.devservers.postgres import NativePostgres
from dedup_broker.devservers.provision import (
    KafkaService,
    PostgresService,
    RedisService,
    ServiceKind,
    provide_kafka,
    provide_postgres,
    provide_redis,
)
from dedup_broker.devservers.redis import NativeRedis

__all__ = [
    "KafkaService",
    "NativeKafka",
    "NativePostgres",
    "NativeRedis",
    "PostgresService",
    "RedisService",
    "ServiceKind",
    "provide_kafka",
    "provide_postgres",
    "provide_redis",
    "unique_name",
]

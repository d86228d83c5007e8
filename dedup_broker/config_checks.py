"""Checks of a configuration as a whole, once its values are read (``config.py``)."""

from __future__ import annotations

import re

from dedup_broker.config import BrokerConfig, camel_case
from dedup_broker.errors import ConfigError
from dedup_broker.redis_url import RedisUrlError, check_redis_url, is_sentinel_url


def check(config: BrokerConfig) -> None:
    """Refuse settings no broker could run with, naming the setting."""
    positive = (
        "max_message_size",
        "managed_ledger_max_entries_per_ledger",
        "managed_ledger_max_size_per_ledger_mbytes",
        "broker_deduplication_entries_interval",
        "broker_deduplication_max_number_of_producers",
        "two_phase_deletion_ledger_deletion_parallelism",
        "dispatcher_max_read_batch_size",
        "keep_alive_interval_seconds",
        "stats_update_frequency_in_secs",
        "max_pending_publish_requests_per_connection",
        "broker_shutdown_timeout_ms",
        "default_number_of_namespace_bundles",
        "cluster_ownership_slots",
        "metadata_store_session_timeout_millis",
        "cluster_peer_timeout_millis",
        "transaction_coordinator_count",
        "transaction_buffer_snapshot_max_transaction_count",
    )
    for name in positive:
        if getattr(config, name) <= 0:
            raise ConfigError(f"{camel_case(name)} must be > 0, got {getattr(config, name)}")
    for name in (
        "broker_service_port",
        "web_service_port",
        "broker_service_port_tls",
        "web_service_port_tls",
    ):
        port = getattr(config, name)
        if port is not None and not 0 <= port <= 65535:
            raise ConfigError(f"{camel_case(name)} must be a TCP port, got {port}")
    if config.broker_service_port is None and config.broker_service_port_tls is None:
        raise ConfigError("brokerServicePort and brokerServicePortTls are both off")
    if config.web_service_port is None and config.web_service_port_tls is None:
        raise ConfigError("webServicePort and webServicePortTls are both off")
    if config.tls_cert_refresh_check_duration_sec <= 0:
        raise ConfigError("tlsCertRefreshCheckDurationSec must be > 0")
    if config.managed_ledger_inactive_ledger_rollover_time_seconds < 0:
        raise ConfigError("managedLedgerInactiveLedgerRolloverTimeSeconds must be >= 0 (0: off)")
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,100}", config.cluster_name):
        raise ConfigError(
            f"clusterName must be 1-100 of [A-Za-z0-9._-] (it prefixes Kafka topics), "
            f"got {config.cluster_name!r}"
        )
    protocols = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
    if config.kafka_security_protocol.upper() not in protocols:
        raise ConfigError(
            f"kafkaSecurityProtocol must be one of {', '.join(protocols)}, "
            f"got {config.kafka_security_protocol!r}"
        )
    if config.kafka_security_protocol.upper().startswith("SASL") and not (
        config.kafka_sasl_mechanism and config.kafka_sasl_username
    ):
        raise ConfigError(
            "kafkaSecurityProtocol SASL_* needs kafkaSaslMechanism and kafkaSaslUsername"
        )
    try:
        check_redis_url(config.redis_url)
    except RedisUrlError as exc:
        raise ConfigError(f"redisUrl: {exc}") from None
    if config.redis_cluster_enabled and is_sentinel_url(config.redis_url):
        raise ConfigError(
            "redisClusterEnabled and a redis+sentinel:// redisUrl exclude each other: "
            "a Redis Cluster fails over by itself, without Sentinel"
        )
    if config.redis_connection() and not config.redis_url.startswith(("rediss://", "rediss+")):
        raise ConfigError(
            "redisSslCaLocation, redisSslCertificateLocation and redisSslKeyLocation need "
            f"a TLS redisUrl (rediss://...), got {config.redis_url.partition(':')[0]}://"
        )
    if config.allow_auto_topic_creation_type not in ("non-partitioned", "partitioned"):
        raise ConfigError(
            "allowAutoTopicCreationType must be non-partitioned or partitioned, "
            f"got {config.allow_auto_topic_creation_type!r}"
        )
    if config.default_num_partitions <= 0:
        raise ConfigError(f"defaultNumPartitions must be > 0, got {config.default_num_partitions}")
    for name in (
        "max_topics_per_namespace",
        "max_connections_per_ip",
        "max_producers_per_topic",
        "max_consumers_per_topic",
        "max_consumers_per_subscription",
    ):
        if getattr(config, name) < 0:
            raise ConfigError(f"{camel_case(name)} must be >= 0 (0: no limit)")
    if config.managed_ledger_default_mark_delete_rate_limit <= 0:
        raise ConfigError("managedLedgerDefaultMarkDeleteRateLimit must be > 0")
    for name in (
        "key_deduplication_pending_timeout_seconds",
        "key_deduplication_redis_timeout_seconds",
    ):
        if getattr(config, name) <= 0:
            raise ConfigError(f"{camel_case(name)} must be > 0, got {getattr(config, name)}")

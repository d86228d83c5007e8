"""The configuration: Pulsar's names, precedence, and Pulsar files that start as is."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import ConfigError

PULSAR_STANDALONE = Path(__file__).parents[1] / "integration" / "data" / "pulsar-standalone.conf"


def test_a_pulsar_standalone_conf_loads_with_its_unimplemented_keys_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="dedup_broker.config"):
        config = BrokerConfig.load(PULSAR_STANDALONE, environ={})
    assert config.broker_deduplication_enabled is True
    assert config.metadata_store_session_timeout_millis == 30000
    assert config.managed_ledger_default_mark_delete_rate_limit == 0.1
    # Empty values leave the defaults, as in Pulsar.
    assert config.advertised_address == BrokerConfig().advertised_address
    assert config.managed_ledger_cache_size_mb == BrokerConfig().managed_ledger_cache_size_mb
    [warning] = [r.getMessage() for r in caplog.records]
    assert "were ignored" in warning
    for key in ("loadBalancerEnabled", "numOrderedExecutorThreads"):
        assert key in warning
    assert "brokerDeduplicationEnabled" not in warning


def test_precedence_file_then_environment_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text("webServicePort=8081\nbrokerServicePort=6651\nclusterName=from-file\n")
    config = BrokerConfig.load(
        path,
        environ={"DEDUP_BROKER_WEB_SERVICE_PORT": "8082"},
        overrides={"clusterName": "from-override"},
    )
    assert (config.broker_service_port, config.web_service_port) == (6651, 8082)
    assert config.cluster_name == "from-override"


def test_explicit_settings_must_exist_and_parse(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown configuration key"):
        BrokerConfig.load(environ={}, overrides={"brokerDedupEnabled": "true"})
    path = tmp_path / "broker.conf"
    path.write_text("brokerServicePort=sixty\n")
    with pytest.raises(ConfigError, match="brokerServicePort: expected int"):
        BrokerConfig.load(path, environ={})
    path.write_text("clusterOwnershipSlots=0\n")
    with pytest.raises(ConfigError, match="clusterOwnershipSlots must be > 0"):
        BrokerConfig.load(path, environ={})


@pytest.mark.parametrize(
    ("setting", "value", "reason"),
    [
        ("allow_auto_topic_creation_type", "sometimes", "allowAutoTopicCreationType must be"),
        ("default_num_partitions", 0, "defaultNumPartitions must be > 0"),
        ("max_producers_per_topic", -1, "maxProducersPerTopic must be >= 0"),
        ("max_connections_per_ip", -5, "maxConnectionsPerIp must be >= 0"),
    ],
)
def test_limits_are_checked(setting: str, value: object, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        BrokerConfig().with_overrides(**{setting: value})


def test_redis_tls_settings_become_redis_py_arguments_and_need_a_rediss_url() -> None:
    config = BrokerConfig.load(
        environ={
            "DEDUP_BROKER_REDIS_URL": "rediss://:pw@redis:6380/0",
            "DEDUP_BROKER_REDIS_SSL_CA_LOCATION": "/etc/redis/ca.pem",
        },
        overrides={"redisSslCertificateLocation": "/etc/redis/client.pem"},
    )
    assert config.redis_connection() == {
        "ssl_ca_certs": "/etc/redis/ca.pem",
        "ssl_certfile": "/etc/redis/client.pem",
    }
    assert BrokerConfig().redis_connection() == {}
    with pytest.raises(ConfigError, match=r"need a TLS redisUrl \(rediss://...\), got redis://"):
        config.with_overrides(redis_url="redis://redis:6379/0")
    cluster = config.with_overrides(redis_url="rediss+cluster://redis:7000")
    assert cluster.redis_connection()["ssl_ca_certs"] == "/etc/redis/ca.pem"

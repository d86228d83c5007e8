"""The configuration: Pulsar's names, precedence, and Pulsar files that start as is."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from dedup_broker.app.cli import main
from dedup_broker.app.standalone import parse_settings
from dedup_broker.config import BrokerConfig, snake_case
from dedup_broker.errors import ConfigError
from dedup_broker.pulsar_settings import PULSAR_ONLY_SETTINGS, pulsar_variable

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


def test_every_kafka_client_reconnects_within_the_configured_backoff() -> None:
    """A node back from a restart (or a coordinator moved off a dead one) is reached again
    within ``kafkaReconnectBackoffMaxMs``, not librdkafka's 10 s."""
    assert BrokerConfig().kafka_connection()["reconnect.backoff.max.ms"] == "1000"
    config = BrokerConfig.load(environ={}, overrides={"kafkaReconnectBackoffMaxMs": "250"})
    assert config.kafka_connection() == {
        "bootstrap.servers": "localhost:9092",
        "security.protocol": "PLAINTEXT",
        "reconnect.backoff.max.ms": "250",
    }


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


def test_pulsar_settings_without_effect_are_accepted_everywhere_with_one_warning_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "broker.conf"
    path.write_text("loadBalancerEnabled=false\nbookkeeper_opportunisticStriping=true\n")
    with caplog.at_level(logging.WARNING, logger="dedup_broker.config"):
        config = BrokerConfig.load(
            path,
            environ={"DEDUP_BROKER_NUM_IO_THREADS": "4", "DEDUP_BROKER_CLUSTER_NAME": "c1"},
            overrides={"topicLevelPoliciesEnabled": "true", "webServicePort": "8090"},
        )
    assert (config.cluster_name, config.web_service_port) == ("c1", 8090)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 3
    file_warning, env_warning, set_warning = warnings
    assert "bookkeeper_opportunisticStriping, loadBalancerEnabled" in file_warning
    assert "numIOThreads" in env_warning
    assert set_warning.startswith("overrides (--set): 1 Pulsar settings are not implemented")
    assert all("no effect" in warning for warning in warnings)
    assert "topicLevelPoliciesEnabled" in set_warning
    assert "topicLevelPoliciesEnabled" not in config.as_pulsar_names()


def test_names_neither_ours_nor_pulsars_are_refused_with_a_suggestion() -> None:
    with pytest.raises(ConfigError, match=r"'brokerDedupEnabled' \(did you mean brokerDeduplic"):
        BrokerConfig.load(environ={}, overrides={"brokerDedupEnabled": "true"})
    with pytest.raises(ConfigError, match=r"did you mean topicLevelPoliciesEnabled\?"):
        BrokerConfig.load(environ={}, overrides={"topicLevelPolicyEnabled": "true"})
    with pytest.raises(ConfigError, match=r"'noSuchThing'$"):
        BrokerConfig.load(environ={}, overrides={"noSuchThing": "1"})
    with pytest.raises(
        ConfigError,
        match=r"variable DEDUP_BROKER_KAFKA_BOOTSTRAP_SERVER \(did you mean "
        r"DEDUP_BROKER_KAFKA_BOOTSTRAP_SERVERS\?\)",
    ):
        BrokerConfig.load(environ={"DEDUP_BROKER_KAFKA_BOOTSTRAP_SERVER": "k:9092"})
    # The dev servers' own variables are not settings, other variables are not ours.
    BrokerConfig.load(environ={"DEDUP_BROKER_CACHE_DIR": "/tmp", "KAFKA_HOME": "/opt/kafka"})


def test_a_file_reports_unknown_names_apart_from_pulsars(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "broker.conf"
    path.write_text("brokerDedupEnabled=true\nloadBalancerEnabled=false\nclusterName=f\n")
    with caplog.at_level(logging.WARNING, logger="dedup_broker.config"):
        config = BrokerConfig.load(path, environ={})
    assert config.cluster_name == "f"
    pulsar, unknown = [r.getMessage() for r in caplog.records]
    assert "loadBalancerEnabled" in pulsar and "brokerDedupEnabled" not in pulsar
    assert "neither dedup-broker's nor Pulsar's" in unknown
    assert "brokerDedupEnabled (did you mean brokerDeduplicationEnabled?)" in unknown


def test_the_pulsar_list_holds_only_settings_this_broker_does_not_implement() -> None:
    for name in PULSAR_ONLY_SETTINGS:
        with pytest.raises(ConfigError):
            snake_case(name)
    assert {"topicLevelPoliciesEnabled", "maxUnackedMessagesPerSubscription"} <= (
        PULSAR_ONLY_SETTINGS
    )
    assert pulsar_variable("NUM_IOTHREADS") == pulsar_variable("NUM_IO_THREADS") == "numIOThreads"
    assert parse_settings(["topicLevelPoliciesEnabled=true"]) == {
        "topicLevelPoliciesEnabled": "true"
    }


def test_the_config_command_does_not_list_pulsar_settings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["config", "--set", "topicLevelPoliciesEnabled=true"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert "topicLevelPoliciesEnabled" not in shown
    assert shown["brokerDeduplicationEnabled"] is False
    assert main(["config", "--set", "brokerDedupEnabled=true"]) == 2
    assert "did you mean brokerDeduplicationEnabled?" in capsys.readouterr().err

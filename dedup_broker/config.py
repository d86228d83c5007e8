"""The broker's configuration: one typed object, Pulsar's names where the concept is Pulsar's.

Attributes are snake_case; their external name (config file key) is the camelCase form,
which is exactly Pulsar's ``broker.conf`` name where Pulsar has the same setting
(``broker_deduplication_enabled`` <-> ``brokerDeduplicationEnabled``). Values come from, in
increasing precedence: defaults, a ``key=value`` file, environment variables named
``DEDUP_BROKER_`` + the UPPER_SNAKE attribute name, and explicit overrides. Pulsar's
settings that this broker does not implement (``pulsar_settings``) are accepted from all
of them with a warning that they have no effect; any other unknown name is refused in
the environment and the overrides (a typo), and reported in a file.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dedup_broker.errors import ConfigError
from dedup_broker.properties_file import read_properties
from dedup_broker.pulsar_settings import PULSAR_ONLY_SETTINGS, is_pulsar_only, pulsar_variable

log = logging.getLogger(__name__)

ENV_PREFIX = "DEDUP_BROKER_"
OTHER_VARIABLES = frozenset(
    {"DEV_SERVERS", "CACHE_DIR", "SPARK_KAFKA_VERSION", "PROVISION", "SKIP_MACHINE"}
    | {"PYPI_JSON_URL", "MAVEN_CENTRAL_URL", "DEBIAN_MIRROR", "REQUIRE_DOCKER"}
)
"""``DEDUP_BROKER_`` variables that the dev servers and the benchmarks read: not settings."""


@dataclasses.dataclass(frozen=True)
class BrokerConfig:
    # --- identity and network -------------------------------------------------------
    cluster_name: str = "standalone"
    """Prefix of every Kafka topic the broker owns; brokers of one cluster share it."""
    bind_address: str = "0.0.0.0"
    advertised_address: str = "localhost"
    advertised_listeners: str = ""
    """Named addresses for clients on other networks: ``internal:pulsar://10.0.0.5:6650,
    external:pulsar+ssl://broker-1.example.com:6651``; a client's ``listenerName`` picks one."""
    broker_service_port: int | None = 6650
    """Plain Pulsar protocol port; ``none`` (or an empty ``--set`` value): no plain listener."""
    web_service_port: int | None = 8080
    """Plain HTTP port; ``none``: HTTPS only."""
    max_message_size: int = 5 * 1024 * 1024
    keep_alive_interval_seconds: int = 30
    stats_update_frequency_in_secs: int = 60
    """Stats period: producers' and consumers' counters are sampled this often, and the
    rates ``topics stats`` shows (``msgRateIn``, ...) are averages over the last one."""
    expose_topic_level_metrics_in_prometheus: bool = True
    """``/metrics`` labels Pulsar's families per topic and subscription; false: summed per
    namespace (the subscription families then left out), for brokers with many topics."""
    allow_auto_topic_creation: bool = True
    allow_auto_topic_creation_type: str = "non-partitioned"
    """``non-partitioned`` or ``partitioned`` (with ``defaultNumPartitions``)."""
    default_num_partitions: int = 1

    # --- limits (0: no limit) -----------------------------------------------------------
    max_topics_per_namespace: int = 0
    """Topics (partitions count one each) a namespace may hold; creating more is refused."""
    max_connections_per_ip: int = 0
    max_producers_per_topic: int = 0
    max_consumers_per_topic: int = 0
    max_consumers_per_subscription: int = 0
    max_pending_publish_requests_per_connection: int = 1000
    """SENDs of one connection awaiting their outcome before the broker stops reading it."""
    broker_shutdown_timeout_ms: int = 60000
    """Bound of a graceful shutdown (clients told to go, writes finished, state stored)."""
    metadata_store_session_timeout_millis: int = 30000
    """Kafka group session (Pulsar's default): long, so a slow Kafka costs no slots."""
    cluster_peer_timeout_millis: int = 6000
    """A broker whose port answers nothing this long is removed from the group."""
    default_number_of_namespace_bundles: int = 4
    cluster_ownership_slots: int = 16
    """Partitions of ``{clusterName}.owners``: the units of ownership bundles map onto.
    Fixed for the life of a cluster."""
    default_tenant: str = "public"
    default_namespace: str = "default"

    # --- security (Pulsar's names) ----------------------------------------------------
    authentication_enabled: bool = False
    authentication_providers: str = ""
    """Comma-separated: ``token``, ``basic`` (or Pulsar's provider class names)."""
    anonymous_user_role: str = ""
    """Role of clients without credentials; empty: they are refused."""
    super_user_roles: str = ""
    """Comma-separated roles allowed everything (authorization)."""
    authorization_enabled: bool = False
    """Check tenants' admin roles and namespace permissions on every operation."""
    authentication_refresh_check_seconds: float = 60
    """How often connections' credentials are checked for expiry (AUTH_CHALLENGE)."""
    broker_client_authentication_plugin: str = ""
    """Brokers' credentials to brokers: ``token``, ``basic``, ``tls`` or Pulsar's class names."""
    broker_client_authentication_parameters: str = ""
    """``token:<jwt>``, ``file:///path``; basic: ``{"userId": ..., "password": ...}``."""
    broker_client_trust_certs_file_path: str = ""
    """CAs (PEM) that brokers and the deletion worker verify other brokers' HTTPS with;
    empty: ``tlsTrustCertsFilePath``, and without it the system's CAs."""
    broker_client_certificate_file_path: str = ""
    """Client certificate (PEM) presented on those HTTPS calls (the ``tls`` plugin's)."""
    broker_client_key_file_path: str = ""
    """Private key (PEM) of ``brokerClientCertificateFilePath``."""
    token_secret_key: str = ""
    """HS256 key: ``data:;base64,<key>``, ``file:///path`` (raw bytes) or base64."""
    token_public_key: str = ""
    """RS256/ES256 public key (PEM or DER), same forms as ``tokenSecretKey``."""
    token_auth_claim: str = "sub"
    token_audience_claim: str = "aud"
    token_audience: str = ""
    basic_auth_conf: str = ""
    """An htpasswd file of bcrypt hashes (``htpasswd -B``): a path or ``data:;base64,``."""

    # --- TLS (Pulsar's names) ---------------------------------------------------------
    broker_service_port_tls: int | None = None
    """Pulsar protocol over TLS (Pulsar uses 6651); unset: no TLS listener."""
    web_service_port_tls: int | None = None
    """HTTPS port (Pulsar uses 8443); unset: no HTTPS."""
    tls_certificate_file_path: str = ""
    """The broker's certificate chain (PEM)."""
    tls_key_file_path: str = ""
    """The broker's private key (PEM, unencrypted)."""
    tls_trust_certs_file_path: str = ""
    """CA certificates (PEM) that client certificates are verified against; empty: client
    certificates are neither requested nor accepted."""
    tls_allow_insecure_connection: bool = False
    """Do not request or verify client certificates even with ``tlsTrustCertsFilePath``."""
    tls_require_trusted_client_cert_on_connect: bool = False
    """Refuse TLS handshakes without a client certificate the trusted CAs signed."""
    tls_protocols: str = ""
    """Comma-separated, e.g. ``TLSv1.3,TLSv1.2``; empty: the ssl library's defaults."""
    tls_ciphers: str = ""
    """Comma-separated OpenSSL cipher names (TLSv1.2 and older); empty: defaults."""
    tls_cert_refresh_check_duration_sec: int = 300
    """How often the certificate files are checked for changes (and then re-read)."""

    # --- Kafka (storage) -----------------------------------------------------------
    kafka_bootstrap_servers: str = "localhost:9092"
    kafka_replication_factor: int = -1
    """Replication factor of ledger and metadata topics; -1 uses Kafka's default."""
    kafka_request_timeout_ms: int = 30000
    kafka_delivery_timeout_ms: int = 30000
    kafka_producer_linger_ms: int = 1
    kafka_reconnect_backoff_max_ms: int = 1000
    kafka_producer_pool_size: int = 8
    """Kafka producers (each with its thread) the broker writes through, a topic always
    through the same one: a producer's cost per record grows with its number of topics."""
    kafka_producer_idle_topic_seconds: int = 120
    """A ledger not written to for this long is dropped from its Kafka producer (what
    librdkafka keeps of a topic, about 6 KB, goes when that producer is renewed); its next
    append costs one metadata request. 0: kept while the ledger is open."""
    kafka_reader_pool_size: int = 4
    """Kafka consumers (each with its thread) serving reads that miss the entry cache."""
    kafka_security_protocol: str = "PLAINTEXT"
    """librdkafka's ``security.protocol``: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
    kafka_sasl_mechanism: str = ""
    """PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (with ``kafkaSaslUsername``/``Password``)."""
    kafka_sasl_username: str = ""
    kafka_sasl_password: str = ""
    kafka_ssl_ca_location: str = ""
    """PEM file of the CAs that signed Kafka's certificates (SSL, SASL_SSL)."""
    kafka_ssl_certificate_location: str = ""
    """Client certificate (PEM) for Kafka listeners that require one."""
    kafka_ssl_key_location: str = ""
    kafka_ssl_key_password: str = ""

    # --- managed ledgers ----------------------------------------------------------
    managed_ledger_max_entries_per_ledger: int = 50000
    managed_ledger_min_ledger_rollover_time_minutes: float = 10
    managed_ledger_max_ledger_rollover_time_minutes: float = 240
    managed_ledger_max_size_per_ledger_mbytes: int = 2048
    managed_ledger_inactive_ledger_rollover_time_seconds: int = 0
    """An idle ledger is closed after this long and the next append creates the next one
    (docs/storage.md, "Inactive ledgers"). 0: off, a ledger is always open for appends."""
    managed_ledger_cache_size_mb: int = 256
    managed_ledger_default_mark_delete_rate_limit: float = 1.0
    """Cursor position writes per second per cursor; acks in between are batched."""
    managed_ledger_max_unacked_ranges_to_persist: int = 10000
    """Individually acknowledged ranges stored per cursor; beyond it they are redelivered."""
    managed_ledger_max_batch_deleted_index_to_persist: int = 10000
    """Batches acknowledged in part whose ack sets are stored per cursor (the first ones
    after the mark-delete position); beyond it their acknowledged messages come again
    after a restart or handover."""

    # --- consumers ------------------------------------------------------------------
    max_unacked_messages_per_consumer: int = 50000
    delayed_delivery_enabled: bool = True
    """Shared and Key_Shared subscriptions hold messages until their ``deliver_at_time``."""
    subscription_key_shared_use_consistent_hashing: bool = True  # off: classic range split
    active_consumer_failover_delay_time_millis: int = 1000
    """Failover: nothing is sent for this long after the active consumer changed, so that the
    one active before acknowledges what it had received (0: hand over at once)."""
    active_consumer_failover_consistent_hashing: bool = False
    """Failover: partitions too pick their active consumer on the hash ring, not in turn."""
    acknowledgment_at_batch_index_level_enabled: bool = True
    """Acks of part of a batch are kept (and stored with the cursor): a redelivered batch
    carries the ack set, so that clients skip the messages already acknowledged."""
    dispatcher_max_read_batch_size: int = 100

    # --- deduplication (PIP-6) ------------------------------------------------------
    broker_deduplication_enabled: bool = False
    broker_deduplication_entries_interval: int = 1000
    broker_deduplication_snapshot_interval_seconds: int = 120
    broker_deduplication_max_number_of_producers: int = 10000
    broker_deduplication_producer_inactivity_timeout_minutes: float = 360
    """Pulsar's is whole minutes; fractions are taken too (tests use seconds)."""

    # --- schemas ----------------------------------------------------------------------
    schema_compatibility_strategy: str = "FULL"
    """Namespaces without their own strategy: ``ALWAYS_INCOMPATIBLE``, ``ALWAYS_COMPATIBLE``,
    ``BACKWARD``, ``FORWARD``, ``FULL`` or their ``*_TRANSITIVE`` forms."""
    is_allow_auto_update_schema_enabled: bool = True
    """Producers may register a new schema version on a topic that has a schema."""
    is_schema_validation_enforced: bool = False
    """Producers without a schema are refused on a topic that has one."""

    # --- key-window deduplication -------------------------------------------------
    redis_url: str = "redis://localhost:6379/0"
    """Redis of key-window deduplication: ``redis://host:port/db`` (``rediss://`` over
    TLS), ``redis+cluster://host1:port1,host2:port2`` for a Redis Cluster, or
    ``redis+sentinel://host1:port1,host2:port2/<master-name>[/db]`` for a primary with
    replicas under Sentinel (followed through failovers; ``rediss+sentinel://``)."""
    redis_cluster_enabled: bool = False
    """Talk to ``redisUrl`` as a Redis Cluster (also implied by a ``redis+cluster://`` URL)."""
    redis_ssl_ca_location: str = ""
    """PEM file of the CAs that signed Redis's certificate (a ``rediss://`` ``redisUrl``)."""
    redis_ssl_certificate_location: str = ""
    """Client certificate (PEM) for a Redis that requires one (``tls-auth-clients yes``)."""
    redis_ssl_key_location: str = ""
    broker_key_deduplication_enabled: bool = False
    """Key-window deduplication for topics without their own keyDeduplication policy."""
    key_deduplication_key_source: str = "content"
    """``content`` (SHA-256 of the payload), ``partitionKey`` or ``property:<name>``."""
    key_deduplication_window: str = "5m"
    key_deduplication_scope: str = "topic"
    """``topic`` (all partitions of a topic) or ``namespace``."""
    key_deduplication_on_redis_unavailable: str = "reject"
    """``reject`` (retriable errors, no duplicates) or ``accept`` (availability first)."""
    key_deduplication_local_cache_size: int = 200000
    """Recently stored keys each broker answers repeats from without asking Redis."""
    key_deduplication_pending_timeout_seconds: int = 120
    """How long Redis keeps a claim of a write in flight if its broker never settles it."""
    key_deduplication_redis_timeout_seconds: float = 2.0

    # --- two-phase deletion (PIP-186) ---------------------------------------------
    topic_two_phase_deletion_enabled: bool = True
    two_phase_deletion_ledger_deletion_parallelism: int = 4
    two_phase_deletion_reconsume_later_in_seconds: int = 60
    two_phase_deletion_max_retry_delete_count: int = 5
    two_phase_deletion_topic: str = "__ledger_deletion"
    two_phase_deletion_retry_topic: str = "__ledger_deletion-RETRY"
    two_phase_deletion_dead_letter_topic: str = "__ledger_deletion-DLQ"
    deletion_worker_web_service_port: int = 8081
    """Port of the deletion worker's ``/metrics``."""
    deletion_worker_inject_delete_failures: str = ""
    """Test aid: ``all`` or comma-separated ledger ids whose storage deletes fail."""

    # --- tiered storage (offload) ---------------------------------------------------
    managed_ledger_offload_driver: str = ""
    """``filesystem`` (a directory as tiered storage) or empty: no offloading."""
    file_system_uri: str = ""
    """The filesystem offloader's directory (``fileSystemURI``: a path or ``file://``)."""
    managed_ledger_offload_deletion_lag_ms: int = 14_400_000
    """How long a ledger's Kafka copy is kept after its offload; negative: forever."""
    managed_ledger_offload_auto_trigger_size_threshold_bytes: int = -1
    """Namespace default of ``offloadThreshold``: Kafka bytes kept before offloading."""
    managed_ledger_offload_threshold_in_seconds: int = -1
    """Namespace default of ``offloadThresholdInSeconds``: closed ledgers older than this
    are offloaded (negative: off, 0: every closed ledger)."""

    # --- topic compaction -------------------------------------------------------------
    broker_service_compaction_threshold_in_bytes: int = 0
    """Namespace default of ``compactionThreshold``: uncompacted bytes that start a
    compaction (checked with the broker's housekeeping); 0: only when asked."""
    topic_compaction_retain_null_key: bool = False
    """Keep messages without a key in the compacted view (Pulsar's PIP-318 setting)."""

    # --- transactions (PIP-31) ---------------------------------------------------------
    transaction_coordinator_enabled: bool = False
    transaction_coordinator_count: int = 1
    """Coordinators of the cluster: partitions of ``pulsar/system/transaction_coordinator_
    assign``, each owned like a topic (Pulsar sets it when a cluster is initialized)."""
    transaction_buffer_snapshot_max_transaction_count: int = 1000
    """Transactions ended on a topic between two snapshots of its transaction buffer."""

    # --- retention (trimming) -------------------------------------------------------
    default_retention_time_in_minutes: int = 0
    default_retention_size_in_mb: int = 0
    retention_check_interval_in_seconds: int = 120
    # backlog quotas (dedup_broker/backlog/quota.py), -1: none
    backlog_quota_check_enabled: bool = True
    backlog_quota_check_interval_in_seconds: int = 60
    backlog_quota_default_limit_bytes: int = -1
    backlog_quota_default_limit_gb: float = -1
    backlog_quota_default_limit_second: int = -1
    backlog_quota_default_retention_policy: str = "producer_request_hold"

    def kafka_connection(self) -> dict[str, str]:
        """The librdkafka settings every Kafka client of the broker, the deletion worker
        and the doctor connects with: the bootstrap servers and the listener's security."""
        settings = {
            "bootstrap.servers": self.kafka_bootstrap_servers,
            "security.protocol": self.kafka_security_protocol,
            "reconnect.backoff.max.ms": str(self.kafka_reconnect_backoff_max_ms),
        }
        optional = {
            "sasl.mechanism": self.kafka_sasl_mechanism,
            "sasl.username": self.kafka_sasl_username,
            "sasl.password": self.kafka_sasl_password,
            "ssl.ca.location": self.kafka_ssl_ca_location,
            "ssl.certificate.location": self.kafka_ssl_certificate_location,
            "ssl.key.location": self.kafka_ssl_key_location,
            "ssl.key.password": self.kafka_ssl_key_password,
        }
        settings.update({key: value for key, value in optional.items() if value})
        return settings

    def redis_connection(self) -> dict[str, str]:
        """redis-py's TLS arguments (``ssl_ca_certs``, ...) for ``redisUrl``: the ones set."""
        settings = {
            "ssl_ca_certs": self.redis_ssl_ca_location,
            "ssl_certfile": self.redis_ssl_certificate_location,
            "ssl_keyfile": self.redis_ssl_key_location,
        }
        return {key: value for key, value in settings.items() if value}

    def with_overrides(self, **changes: Any) -> BrokerConfig:
        """A copy with some attributes replaced (values are coerced like file values)."""
        return _build(dataclasses.asdict(self) | _coerce_all(changes))

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> BrokerConfig:
        """Defaults, then the file, then the environment, then ``overrides``."""
        values: dict[str, Any] = {}
        if path is not None:
            values |= _file_values(Path(path))
        values |= _environment_values(os.environ if environ is None else environ)
        explicit = dict(overrides or {})
        _ignore("overrides (--set)", [key for key in explicit if is_pulsar_only(key)])
        values |= _coerce_all({k: v for k, v in explicit.items() if not is_pulsar_only(k)})
        return _build(values)

    def as_pulsar_names(self) -> dict[str, Any]:
        """The configuration under its external (camelCase) names, for display."""
        return {camel_case(k): v for k, v in dataclasses.asdict(self).items()}


_FIELDS = {f.name: f for f in dataclasses.fields(BrokerConfig)}
_BY_CAMEL = {}  # filled below


def camel_case(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def snake_case(name: str) -> str:
    if name in _FIELDS:
        return name
    if name in _BY_CAMEL:
        return _BY_CAMEL[name]
    # Pulsar spells some acronyms in capitals (managedLedgerCacheSizeMB).
    lowered = re.sub(r"([A-Z]+)", lambda m: "_" + m.group(1).lower(), name)
    if lowered in _FIELDS:
        return lowered
    raise ConfigError(f"unknown configuration key {name!r}{_suggestion(name)}")


def _suggestion(name: str) -> str:
    """`` (did you mean X?)`` for a setting name close to ``name`` (ours or Pulsar's)."""
    return _did_you_mean(name, [*_BY_CAMEL, *sorted(PULSAR_ONLY_SETTINGS)])


def _did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def _ignore(source: object, names: list[str]) -> None:
    """One warning for the Pulsar settings ``source`` gave that have no effect here."""
    if names:
        log.warning(
            "%s: %d Pulsar settings are not implemented by dedup-broker and were ignored "
            "(they have no effect here): %s",
            source,
            len(names),
            ", ".join(sorted(names)),
        )


def _environment_values(env: Mapping[str, str]) -> dict[str, Any]:
    """``DEDUP_BROKER_*`` variables: settings, Pulsar's (ignored), or a typo (refused)."""
    values: dict[str, Any] = {}
    ignored: list[str] = []
    for key, text in env.items():
        suffix = key.removeprefix(ENV_PREFIX)
        if suffix == key or suffix in OTHER_VARIABLES:
            continue
        if suffix.lower() in _FIELDS:
            values[suffix.lower()] = _coerce(suffix.lower(), text)
        elif (pulsar := pulsar_variable(suffix)) is not None:
            ignored.append(pulsar)
        else:
            known = [ENV_PREFIX + name.upper() for name in _FIELDS]
            raise ConfigError(f"unknown configuration variable {key}{_did_you_mean(key, known)}")
    _ignore("the environment", ignored)
    return values


_BY_CAMEL.update({camel_case(name): name for name in _FIELDS})
_BY_CAMEL["managedLedgerCacheSizeMB"] = "managed_ledger_cache_size_mb"


def _file_values(path: Path) -> dict[str, Any]:
    """A Pulsar ``broker.conf``/``standalone.conf`` as Pulsar reads it: an empty value
    leaves the default; a key this broker does not implement is reported, not fatal,
    so an existing Pulsar configuration starts as is."""
    values: dict[str, Any] = {}
    ignored: list[str] = []
    unknown: list[str] = []
    for key, text in read_properties(path).items():
        if not text:
            continue
        if is_pulsar_only(key):
            ignored.append(key)
            continue
        try:
            name = snake_case(key)
        except ConfigError:
            unknown.append(key + _suggestion(key))
            continue
        values[name] = _coerce(name, text)
    _ignore(path, ignored)
    if unknown:
        log.warning(
            "%s: %d settings are neither dedup-broker's nor Pulsar's and were ignored: %s",
            path,
            len(unknown),
            ", ".join(sorted(unknown)),
        )
    return values


def _coerce_all(values: Mapping[str, Any]) -> dict[str, Any]:
    coerced: dict[str, Any] = {}
    for key, value in values.items():
        name = snake_case(key)
        coerced[name] = _coerce(name, value)
    return coerced


def _coerce(name: str, value: Any) -> Any:
    field = _FIELDS.get(name)
    if field is None:
        raise ConfigError(f"unknown configuration key {name!r}")
    kind = field.type if isinstance(field.type, str) else field.type.__name__
    if not isinstance(value, str):
        return value
    text = value.strip()
    if kind.endswith(" | None"):
        if text.lower() in ("", "none"):
            return None
        kind = kind.removesuffix(" | None")
    try:
        if kind == "bool":
            if text.lower() in ("true", "1", "yes", "on"):
                return True
            if text.lower() in ("false", "0", "no", "off"):
                return False
            raise ValueError(text)
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
    except ValueError:
        raise ConfigError(f"{camel_case(name)}: expected {kind}, got {value!r}") from None
    return text


def _build(values: Mapping[str, Any]) -> BrokerConfig:
    config = BrokerConfig(**values)
    _validate(config)
    return config


def _validate(config: BrokerConfig) -> None:
    from dedup_broker.config_checks import check  # it reads BrokerConfig: imported late

    check(config)

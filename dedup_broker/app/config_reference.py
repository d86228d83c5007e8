"""docs/configuration.md, written from ``BrokerConfig``: its fields, types, defaults and
attribute docstrings.

``python -m dedup_broker.app.config_reference`` rewrites the page; a unit test fails when
the page differs from what this module writes, so a setting added, renamed, re-typed or
re-described shows up there in the same change. Names are the ones ``dedup-broker config``
prints. Settings whose docstring is missing take their line from ``MEANINGS`` below.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

from dedup_broker import config as config_module
from dedup_broker.config import BrokerConfig, camel_case
from dedup_broker.pulsar_settings import PULSAR_ONLY_SETTINGS, PULSAR_SETTING_PREFIXES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
SOURCE = Path(config_module.__file__)

MEANINGS: dict[str, str] = {
    "bind_address": "Address the broker's listeners bind to.",
    "advertised_address": "Host name clients and other brokers are told to connect to.",
    "max_message_size": "Largest message (payload and metadata) a producer may send, bytes.",
    "keep_alive_interval_seconds": "A connection silent this long is sent a PING; one that "
    "has not answered by the next check is closed.",
    "allow_auto_topic_creation": "Topics are created when a producer or consumer names them.",
    "default_num_partitions": "Partitions of an automatically created partitioned topic.",
    "max_connections_per_ip": "Connections one client address may hold.",
    "max_producers_per_topic": "Producers one topic may have.",
    "max_consumers_per_topic": "Consumers one topic may have.",
    "max_consumers_per_subscription": "Consumers one subscription may have.",
    "default_number_of_namespace_bundles": "Bundles a new namespace is split into.",
    "default_tenant": "Tenant of short topic names (``my-topic``).",
    "default_namespace": "Namespace (of ``defaultTenant``) of short topic names.",
    "authentication_enabled": "Clients must authenticate with one of ``authenticationProviders``.",
    "token_auth_claim": "Token claim that holds the client's role.",
    "token_audience_claim": "Token claim that holds the audience.",
    "token_audience": "Audience a token must name; empty: not checked.",
    "kafka_bootstrap_servers": "Kafka brokers to connect to (``host:port,...``).",
    "kafka_request_timeout_ms": "Kafka clients' ``request.timeout.ms``.",
    "kafka_delivery_timeout_ms": "Kafka producers' ``delivery.timeout.ms``: a write fails "
    "after it.",
    "kafka_producer_linger_ms": "Kafka producers' ``linger.ms``.",
    "kafka_reconnect_backoff_max_ms": "Kafka clients' ``reconnect.backoff.max.ms``: at "
    "librdkafka's default, 10 s, a transaction coordinator moved off a dead Kafka node was "
    "found 10-20 s late, and the acknowledgements of its slot waited as long.",
    "kafka_sasl_username": "SASL user name.",
    "kafka_sasl_password": "SASL password.",
    "kafka_ssl_key_location": "Private key (PEM) of ``kafkaSslCertificateLocation``.",
    "kafka_ssl_key_password": "Password of ``kafkaSslKeyLocation``, if it is encrypted.",
    "managed_ledger_max_entries_per_ledger": "Entries after which a ledger is rolled over.",
    "managed_ledger_min_ledger_rollover_time_minutes": "Youngest age at which a ledger may roll.",
    "managed_ledger_max_ledger_rollover_time_minutes": "Age at which a ledger is rolled over.",
    "managed_ledger_max_size_per_ledger_mbytes": "Size at which a ledger is rolled over.",
    "managed_ledger_cache_size_mb": "Memory of the entry cache that serves tailing reads.",
    "max_unacked_messages_per_consumer": "Unacknowledged messages after which a consumer "
    "gets no more; 0: no limit.",
    "subscription_key_shared_use_consistent_hashing": "Key_Shared assigns keys on a hash "
    "ring; false: by splitting the hash range.",
    "dispatcher_max_read_batch_size": "Entries read from storage at a time for a subscription.",
    "broker_deduplication_enabled": "Message deduplication (PIP-6) for namespaces without "
    "their own policy.",
    "broker_deduplication_entries_interval": "Entries between two snapshots of a topic's "
    "producer sequence ids.",
    "broker_deduplication_snapshot_interval_seconds": "Time between those snapshots.",
    "broker_deduplication_max_number_of_producers": "Producers whose sequence ids a topic keeps.",
    "redis_ssl_key_location": "Private key (PEM) of ``redisSslCertificateLocation``.",
    "key_deduplication_window": "How long a key is remembered (``30s``, ``5m``, ``1h``, ...).",
    "key_deduplication_redis_timeout_seconds": "Bound of one Redis call.",
    "topic_two_phase_deletion_enabled": "Ledgers of deleted topics are deleted through "
    "``__ledger_deletion`` intents (PIP-186).",
    "two_phase_deletion_ledger_deletion_parallelism": "Ledger deletions a deletion worker "
    "runs at once.",
    "two_phase_deletion_reconsume_later_in_seconds": "Delay before a failed deletion is retried.",
    "two_phase_deletion_max_retry_delete_count": "Retries before an intent goes to the "
    "dead-letter topic.",
    "two_phase_deletion_topic": "Topic of deletion intents.",
    "two_phase_deletion_retry_topic": "Topic of deletion intents to retry.",
    "two_phase_deletion_dead_letter_topic": "Topic of deletion intents that kept failing.",
    "transaction_coordinator_enabled": "Transactions (PIP-31) are served.",
    "default_retention_time_in_minutes": "Namespace default of the retention time of "
    "acknowledged data (-1: forever).",
    "default_retention_size_in_mb": "Namespace default of the retention size of acknowledged "
    "data (-1: no limit).",
    "retention_check_interval_in_seconds": "How often ledgers are checked for trimming.",
    "backlog_quota_check_enabled": "Backlog quotas are checked periodically.",
    "backlog_quota_check_interval_in_seconds": "How often backlog quotas are checked.",
    "backlog_quota_default_limit_bytes": "Namespace default backlog limit in bytes; -1: none.",
    "backlog_quota_default_limit_gb": "The same in GB (Pulsar's older name); -1: none.",
    "backlog_quota_default_limit_second": "Namespace default age limit of a backlog; -1: none.",
    "backlog_quota_default_retention_policy": "What a quota breach does: "
    "``producer_request_hold``, ``producer_exception`` or ``consumer_backlog_eviction``.",
}
"""One line for each setting without an attribute docstring."""

INTRO = """\
# Configuration

<!-- Written by `python -m dedup_broker.app.config_reference`; edit that module or the
docstrings of dedup_broker/config.py, not this page. -->

Every setting of a broker (and of its deletion worker), with the name
`dedup-broker config` prints: Pulsar's `broker.conf` name where Pulsar has the setting.
Values come from, in increasing precedence: the defaults below, a `key=value` file
(`serve -c broker.conf`; an empty value keeps the default), environment variables
`DEDUP_BROKER_<UPPER_SNAKE_NAME>` (`DEDUP_BROKER_KAFKA_BOOTSTRAP_SERVERS`) and
`--set name=value`. `dedup-broker config` prints the effective values. Names with an
acronym are also read in Pulsar's capitals (`defaultRetentionSizeInMB`).

Types: `int | None` takes `none` (or an empty `--set` value) for "unset"; `bool` takes
`true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`).
"""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One field of ``BrokerConfig`` as the page shows it."""

    name: str
    type: str
    default: Any
    meaning: str
    section: str
    aliases: tuple[str, ...]


def docstrings_and_sections() -> tuple[dict[str, str], dict[str, str]]:
    """Each field's attribute docstring and the ``# --- section ---`` it sits under."""
    text = SOURCE.read_text()
    lines = text.splitlines()
    tree = ast.parse(text)
    cls = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == BrokerConfig.__name__
    )
    docs: dict[str, str] = {}
    sections: dict[str, str] = {}
    heading = re.compile(r"#\s*---\s*(.+?)\s*-+\s*$")
    for index, node in enumerate(cls.body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        name = node.target.id
        following = cls.body[index + 1] if index + 1 < len(cls.body) else None
        if (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[name] = " ".join(re.sub(r"_\n\s+", "_", following.value.value).split())
        for line in reversed(lines[: node.lineno - 1]):
            if match := heading.search(line.strip()):
                sections[name] = match.group(1)
                break
    return docs, sections


def _rst_to_md(text: str) -> str:
    return text.replace("``", "`").replace("|", "\\|")


def settings() -> list[Setting]:
    """The settings, in the order of ``BrokerConfig``."""
    docs, sections = docstrings_and_sections()
    defaults = BrokerConfig().as_pulsar_names()
    aliases: dict[str, list[str]] = {}
    for alias, attribute in config_module._BY_CAMEL.items():
        if alias != camel_case(attribute):
            aliases.setdefault(attribute, []).append(alias)
    result = []
    for field in dataclasses.fields(BrokerConfig):
        name = camel_case(field.name)
        result.append(
            Setting(
                name=name,
                type=str(field.type),
                default=defaults[name],
                meaning=docs.get(field.name) or MEANINGS.get(field.name, ""),
                section=sections.get(field.name, "other"),
                aliases=tuple(sorted(aliases.get(field.name, []))),
            )
        )
    return result


def _default(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value == "":
        return "empty"
    return f"`{value}`"


def _table(rows: list[Setting]) -> str:
    lines = ["| Name | Type | Default | Meaning |", "|---|---|---|---|"]
    for row in rows:
        meaning = _rst_to_md(row.meaning)
        if row.aliases:
            meaning += " Also read as " + ", ".join(f"`{a}`" for a in row.aliases) + "."
        kind = row.type.replace("|", "\\|")
        lines.append(f"| `{row.name}` | `{kind}` | {_default(row.default)} | {meaning} |")
    return "\n".join(lines) + "\n"


def _pulsar_only() -> str:
    names = ", ".join(f"`{name}`" for name in sorted(PULSAR_ONLY_SETTINGS, key=str.lower))
    prefixes = ", ".join(f"`{prefix}`" for prefix in PULSAR_SETTING_PREFIXES)
    body = textwrap.fill(names, width=96, break_long_words=False, break_on_hyphens=False)
    return (
        "## Pulsar settings accepted without effect\n\n"
        "These Pulsar `broker.conf` names (and any name starting with "
        f"{prefixes}) are accepted in a file, in the environment and with `--set`, with a "
        "warning that they have no effect here (`dedup_broker/pulsar_settings.py`). Any "
        "other unknown name is refused with `--set` and in the environment, and reported "
        "in a file.\n\n" + body + "\n"
    )


def reference() -> str:
    """The page's text."""
    parts = [INTRO]
    rows = settings()
    order: list[str] = []
    for row in rows:
        if row.section not in order:
            order.append(row.section)
    for section in order:
        title = section[:1].upper() + section[1:]
        parts.append(f"## {title}\n")
        parts.append(_table([row for row in rows if row.section == section]))
    parts.append(_pulsar_only())
    return "\n".join(parts)


def main() -> None:
    PAGE.write_text(reference())
    sys.stdout.write(f"wrote {PAGE}\n")


if __name__ == "__main__":
    main()

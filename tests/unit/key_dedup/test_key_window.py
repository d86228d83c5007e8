"""Key-window deduplication logic without servers: policies, keys, verdicts, memory."""

from __future__ import annotations

import asyncio
import hashlib
import random

import pytest

from dedup_broker.key_dedup import window
from dedup_broker.key_dedup.memory import InFlightKeys, KeyTable, LocalKeyCache
from dedup_broker.key_dedup.store import ScopeKeys
from dedup_broker.key_dedup.window import (
    InvalidKeyDedupPolicyError,
    KeyDedupPolicy,
    KeySource,
    KeySourceKind,
    KeyState,
    MessageVerdict,
    OnRedisUnavailable,
    Scope,
    entry_keys,
    format_window,
    message_key,
    parse_window,
    stored_keys,
    verdicts,
)
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import SingleMessage, build_batch
from dedup_broker.protocol.framing import encode_message

K, N, D, W, U = (
    MessageVerdict.KEEP,
    MessageVerdict.DROP,
    MessageVerdict.DROP,
    MessageVerdict.WAIT,
    MessageVerdict.UNCHECKED,
)


@pytest.mark.parametrize(
    ("text", "ms"),
    [("250ms", 250), ("30s", 30_000), ("5m", 300_000), ("2h", 7_200_000), ("7d", 604_800_000)],
)
def test_windows_parse_and_format(text: str, ms: int) -> None:
    assert parse_window(text) == ms
    assert format_window(ms) == text
    assert parse_window(ms) == ms


@pytest.mark.parametrize("bad", ["", "0s", "5 weeks", "-1m", "31d", True])
def test_bad_windows_are_refused(bad: object) -> None:
    with pytest.raises(InvalidKeyDedupPolicyError):
        parse_window(bad)


def test_policy_json_fills_from_defaults_and_round_trips() -> None:
    defaults = KeyDedupPolicy(enabled=False, window_ms=60_000)
    policy = KeyDedupPolicy.from_json(
        {"enabled": True, "keySource": "property:id", "scope": "namespace"}, defaults
    )
    assert policy.enabled
    assert policy.key_source == KeySource(KeySourceKind.PROPERTY, "id")
    assert policy.window_ms == 60_000
    assert policy.scope is Scope.NAMESPACE
    assert policy.on_redis_unavailable is OnRedisUnavailable.REJECT
    assert KeyDedupPolicy.from_json(policy.to_json()) == policy


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"enabled": "yes"},
        {"keySource": "property:"},
        {"keySource": "header"},
        {"scope": "cluster"},
        {"onRedisUnavailable": "maybe"},
        {"windw": "5m"},
    ],
)
def test_bad_policies_are_refused(body: object) -> None:
    with pytest.raises(InvalidKeyDedupPolicyError):
        KeyDedupPolicy.from_json(body)


def _message(payload: bytes, key: str | None = None, **props: str) -> SingleMessage:
    meta = pb.SingleMessageMetadata(payload_size=len(payload))
    if key is not None:
        meta.partition_key = key
    for name, value in props.items():
        meta.properties.add(key=name, value=value)
    return SingleMessage(meta, payload)


def test_keys_come_from_content_partition_key_or_a_property() -> None:
    content = KeySource.parse("content")
    by_key = KeySource.parse("partitionKey")
    by_prop = KeySource.parse("property:event")
    a = _message(b"same", key="k1", event="e1")
    b = _message(b"same", key="k2", event="e1")
    assert message_key(content, a) == message_key(content, b)
    assert message_key(content, a) == hashlib.sha256(b"same").digest()[:16]
    assert message_key(by_key, a) != message_key(by_key, b)
    assert message_key(by_prop, a) == message_key(by_prop, b)
    assert message_key(by_prop, _message(b"x")) is None
    assert message_key(by_key, _message(b"x")) is None
    # A partition key and a property with the same text are different keys.
    assert message_key(by_key, _message(b"", key="e1")) != message_key(by_prop, a)


def _entry(messages: list[SingleMessage], **fields: object) -> bytes:
    meta = pb.MessageMetadata(
        producer_name="p",
        sequence_id=0,
        publish_time=1,
        num_messages_in_batch=len(messages),
        **fields,  # type: ignore[arg-type]
    )
    return encode_message(meta, build_batch([(m.metadata, m.payload) for m in messages]))


def test_keys_of_a_whole_entry_match_the_keys_of_each_message() -> None:
    null_key = _message(b"n", key="k1")
    null_key.metadata.null_partition_key = True
    messages = [
        _message(b"same", key="k1", event="e1"),
        _message(b"same", event="e2"),
        _message(b"other", key="k2"),
        null_key,
    ]
    entry = _entry(messages)
    for text in ("content", "partitionKey", "property:event"):
        source = KeySource.parse(text)
        assert entry_keys(entry, source) == [message_key(source, m) for m in messages]
    assert entry_keys(entry, KeySource.parse("partitionKey"))[1::2] == [None, None]  # type: ignore[index]


def test_a_plain_entry_is_keyed_from_its_own_metadata() -> None:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=3, publish_time=1, partition_key="k1")
    entry = encode_message(meta, b"body")
    assert entry_keys(entry, KeySource.parse("partitionKey")) == [
        message_key(KeySource.parse("partitionKey"), _message(b"body", key="k1"))
    ]
    assert entry_keys(entry, KeySource.parse("content")) == [hashlib.sha256(b"body").digest()[:16]]


def test_entries_that_cannot_be_keyed_have_no_keys() -> None:
    source = KeySource.parse("content")
    encrypted = _entry([_message(b"x")], encryption_keys=[pb.EncryptionKeys(key="k", value=b"v")])
    chunk = _entry([_message(b"x")], num_chunks_from_msg=3, chunk_id=0)
    assert entry_keys(encrypted, source) is None
    assert entry_keys(chunk, source) is None
    assert stored_keys(chunk, source) == []


def test_stored_keys_read_a_whole_batch_entry() -> None:
    messages = [_message(f"m{i}".encode(), event=f"e{i % 2}") for i in range(3)]
    entry = _entry(messages)
    source = KeySource.parse("property:event")
    assert stored_keys(entry, source) == [message_key(source, m) for m in messages]


def test_verdicts_keep_new_drop_stored_and_repeats_inside_the_entry() -> None:
    a, b, c, d = b"a" * 16, b"b" * 16, b"c" * 16, b"d" * 16
    states = {a: KeyState.NEW, b: KeyState.STORED, c: KeyState.IN_FLIGHT, d: KeyState.NEW}
    assert verdicts([a, b, a, None, c, d], states) == [K, N, D, U, W, K]


def _k(text: str) -> bytes:
    return text.encode().ljust(16, b".")


CACHE_PATHS = [False, *([True] if window.compiled_keys is not None else [])]
"""The local cache's generations: dicts, and the compiled key tables where built."""


@pytest.mark.parametrize("compiled", CACHE_PATHS)
def test_local_cache_answers_within_the_window_and_forgets_after(compiled: bool) -> None:
    cache = LocalKeyCache(capacity=4, compiled=compiled)
    cache.add(_k("x"), 1_000)
    assert cache.stored(_k("x"), 1_999, window_ms=1_000)
    assert not cache.stored(_k("x"), 2_000, window_ms=1_000)  # exactly at the window's end
    for key in ("a", "b", "c", "d", "e"):
        cache.add(_k(key), 0)
    assert len(cache) <= 4
    assert not cache.stored(_k("a"), 1, 10) and not cache.stored(_k("b"), 1, 10)  # the oldest
    assert all(cache.stored(_k(key), 1, 10) for key in ("c", "d", "e"))


@pytest.mark.parametrize("compiled", CACHE_PATHS)
def test_local_cache_keeps_about_its_capacity_and_the_latest_anchor(compiled: bool) -> None:
    cache = LocalKeyCache(capacity=1_000, compiled=compiled)
    for entry in range(50):
        cache.add_all([_k(f"{entry}-{n}") for n in range(100)], entry)
    assert 500 <= len(cache) <= 1_000
    assert cache.stored(_k("49-99"), 49, window_ms=1) and not cache.stored(_k("0-0"), 0, 10**6)
    cache.add_all([_k("49-0")], 60)  # stored again (its window passed): the later anchor
    assert cache.stored(_k("49-0"), 69, window_ms=10)
    assert cache.known({_k("49-0"), _k("49-1"), _k("0-0")}) == {_k("49-0"), _k("49-1")}
    assert LocalKeyCache(capacity=0, compiled=compiled).known({_k("x")}) == set()


def test_key_tables_answer_as_the_dict_path() -> None:
    """Random adds (repeats, new anchors, growth past many doublings), then every
    question, of both paths."""
    if window.compiled_keys is None:
        pytest.skip("the compiled helper is not built")
    rng = random.Random(7)
    pool = [rng.randbytes(16) for _ in range(20_000)]
    tables = [KeyTable(compiled=True), KeyTable(compiled=False)]
    for step in range(300):
        keys = rng.sample(pool, rng.randint(0, 200))
        anchor = rng.choice([0, step, 2**62, -5, 2**64])
        for table in tables:
            table.add(keys, anchor)
        probe = set(rng.sample(pool, 50))
        compiled, python = tables
        assert len(compiled) == len(python)
        assert compiled.found(probe) == python.found(probe)
        key = rng.choice(pool)
        assert compiled.get(key) == python.get(key)
        for key in rng.sample(pool, rng.randint(0, 40)):  # holes in probe sequences
            for table in tables:
                table.discard(key)
    assert sorted(tables[0].keys()) == sorted(tables[1].keys())
    assert KeyTable(compiled=True, like=tables[0]).slots == tables[0].slots > 1024
    assert KeyTable(compiled=False).slots == 0
    small = pool[:500]  # churn in one table of 1,024 slots: long probe runs, many holes
    churn = [KeyTable(compiled=True), KeyTable(compiled=False)]
    for step in range(2_000):
        key, add = rng.choice(small), rng.random() < 0.6
        for table in churn:
            table.add([key], step) if add else table.discard(key)
    assert {k: churn[0].get(k) for k in small} == {k: churn[1].get(k) for k in small}
    assert len(churn[0]) == len(churn[1])
    with pytest.raises(ValueError):
        tables[0].add([pool[0], b"short"], 1)
    assert len(tables[0]) == len(tables[1])  # nothing added by a refused call


def test_in_flight_keys_tell_waiters_the_outcome() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        keys = InFlightKeys()
        keys.claim_all([b"s", b"l", b"quiet"])
        stored, lost = keys.get(b"s"), keys.get(b"l")
        assert stored is not None and lost is not None
        assert keys.get(b"s") is stored  # one outcome per write, however many ask
        assert keys.get(b"free") is None
        keys.claim_all([b"s"])  # claimed again while held: the same write's outcome
        keys.settle(b"s", True)
        keys.settle_all([b"l", b"quiet"], False)
        assert len(keys) == 0 and keys.get(b"s") is None
        return await stored, await lost, stored.done() and lost.done()

    assert asyncio.run(scenario()) == (True, False, True)


def test_scope_keys_share_one_cluster_hash_tag() -> None:
    scope = ScopeKeys("c|topic:persistent://t/n/x|content|300000")
    names = [scope.marker, scope.checkpoints, scope.bucket(7), *scope.readable(10**12, 60_000)]
    tags = {name[name.index("{") + 1 : name.index("}")] for name in names}
    assert len(tags) == 1
    assert ScopeKeys("another").tag not in tags


def test_broker_defaults_are_validated_like_policies() -> None:
    from dedup_broker.app.broker_app import validate_settings
    from dedup_broker.config import BrokerConfig
    from dedup_broker.errors import ConfigError
    from dedup_broker.key_dedup.service import key_dedup_defaults

    config = BrokerConfig.load(environ={}, overrides={"keyDeduplicationWindow": "2h"})
    assert key_dedup_defaults(config).window_ms == 2 * 3600 * 1000
    for name, value in (
        ("keyDeduplicationWindow", "soon"),
        ("keyDeduplicationKeySource", "header"),
        ("keyDeduplicationScope", "cluster"),
        ("keyDeduplicationOnRedisUnavailable", "maybe"),
    ):
        with pytest.raises(ConfigError):
            validate_settings(BrokerConfig.load(environ={}, overrides={name: value}))

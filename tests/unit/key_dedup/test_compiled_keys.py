"""The compiled key reader and the pure-Python path give the same keys; whatever the
compiled one finds unusual it leaves to the Python path, which reports the error."""

from __future__ import annotations

import hashlib
import random
import shutil
import struct
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from dedup_broker.errors import ProtocolError
from dedup_broker.key_dedup import window
from dedup_broker.key_dedup.window import (
    KeySource,
    PackedKeys,
    batch_keys_compiled,
    entry_keys,
    entry_keys_packed,
    kept_records_compiled,
)
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import build_batch, compress, kept_records, scan_batch
from dedup_broker.protocol.framing import add_broker_entry_metadata, encode_message, parse_message

SOURCES = [KeySource.parse(t) for t in ("content", "partitionKey", "property:event-id")]

needs_compiled = pytest.mark.skipif(
    window.compiled_keys is None, reason="the compiled key reader is not built here"
)


def test_an_install_with_a_compiler_builds_the_compiled_reader() -> None:
    """Without it key-window deduplication still works, several times slower: an
    install on a machine that could build it and did not is a broken install."""
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not (shutil.which("cc") or shutil.which("gcc")) or not headers.exists():
        pytest.skip("no C compiler or no Python headers: the pure-Python path is used")
    assert window.compiled_keys is not None, "pip install -e . did not build _batch_keys"


def _random_record(rng: random.Random) -> tuple[pb.SingleMessageMetadata, bytes]:
    meta = pb.SingleMessageMetadata()
    for _ in range(rng.randrange(4)):
        name = rng.choice(["event-id", "other", "event-idx", "", "ünï"])
        meta.properties.add(key=name, value=rng.choice(["", "v", "é", str(rng.random())]))
    if rng.random() < 0.7:
        meta.partition_key = rng.choice(["", "k", str(rng.random()), "ключ"])
    if rng.random() < 0.2:
        meta.null_partition_key = rng.random() < 0.5
    if rng.random() < 0.3:
        meta.sequence_id = rng.randrange(1 << 64)
    if rng.random() < 0.2:
        meta.event_time = rng.randrange(1 << 40)
    if rng.random() < 0.2:
        meta.ordering_key = rng.randbytes(rng.randrange(5))
    return meta, rng.randbytes(rng.choice([0, 1, 55, 56, 64, 100, 1000, 4000]))


def _python_keys(meta: pb.MessageMetadata, payload: bytes, source: KeySource) -> object:
    return window._keys(source, scan_batch(meta, payload))


@pytest.fixture(params=[True, False], ids=["sha-extensions", "portable"])
def hashing(request: pytest.FixtureRequest) -> Iterator[bool]:
    """The compiled reader hashing with the processor's SHA extensions (where it has
    them; skipped where not) and with its portable code."""
    if window.compiled_keys is None:
        pytest.skip("the compiled key reader is not built here")
    on = window.compiled_keys.accelerated(request.param)
    if request.param and not on:
        pytest.skip("this processor has no SHA extensions")
    yield on
    window.compiled_keys.accelerated(True)


def test_compiled_digests_are_sha256(hashing: bool) -> None:
    rng = random.Random(7)
    for size in [*range(0, 200), 1_000, 4_096, 10_001]:
        data = rng.randbytes(size)
        for prefix in (-1, ord("k")):
            head = bytes([prefix]) if prefix >= 0 else b""
            expected = hashlib.sha256(head + data).digest()[:16]
            assert window.compiled_keys.digest16(prefix, data) == expected, (size, prefix)


def test_keys_hashed_two_at_a_time_are_sha256(hashing: bool) -> None:
    """A batch's keys are hashed in pairs: every pairing of lengths (one block or more,
    in place or staged, a key long enough to be hashed alone), with messages without a
    key between them and an odd one left at the end, gives each message its own digest."""
    rng = random.Random(11)
    lengths = [*range(0, 200), 1_000, 4_096]
    rng.shuffle(lengths)
    records = []
    for length in lengths:
        meta = pb.SingleMessageMetadata()
        if rng.random() < 0.9:
            meta.partition_key = "".join(rng.choices("abcxyz019", k=length))
        records.append((meta, rng.randbytes(length)))
    data = build_batch(records)
    count = len(records)
    assert batch_keys_compiled(data, count, SOURCES[1]) == [
        hashlib.sha256(b"k" + meta.partition_key.encode()).digest()[:16]
        if meta.HasField("partition_key")
        else None
        for meta, _ in records
    ]
    assert batch_keys_compiled(data, count, SOURCES[0]) == [
        hashlib.sha256(payload).digest()[:16] for _, payload in records
    ]


@needs_compiled
@pytest.mark.parametrize("seed", range(40))
def test_compiled_and_python_keys_are_identical(seed: int, hashing: bool) -> None:
    rng = random.Random(seed)
    records = [_random_record(rng) for _ in range(rng.randrange(1, 60))]
    data = build_batch(records)
    meta = pb.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=len(records)
    )
    for source in SOURCES:
        expected = _python_keys(meta, data, source)
        compiled = batch_keys_compiled(data, len(records), source)
        # Non-ASCII key texts are left to the Python path (None), never keyed differently.
        assert compiled is None or compiled == expected


@needs_compiled
def test_ascii_batches_are_read_by_the_compiled_path() -> None:
    records = []
    for i in range(300):
        meta = pb.SingleMessageMetadata(partition_key=f"key-{i}")
        meta.properties.add(key="event-id", value=f"e{i % 7}")
        records.append((meta, f"payload {i}".encode() * (i % 5)))
    records.append((pb.SingleMessageMetadata(), b"no key"))
    data = build_batch(records)
    count = len(records)
    assert batch_keys_compiled(data, count, SOURCES[1]) == [
        *(hashlib.sha256(f"kkey-{i}".encode()).digest()[:16] for i in range(300)),
        None,
    ]
    assert batch_keys_compiled(data, count, SOURCES[2]) == [
        *(hashlib.sha256(f"pe{i % 7}".encode()).digest()[:16] for i in range(300)),
        None,
    ]
    assert batch_keys_compiled(data, count, SOURCES[0]) == [
        hashlib.sha256(payload).digest()[:16] for _, payload in records
    ]


@needs_compiled
def test_malformed_batches_are_left_to_the_python_path() -> None:
    data = build_batch([(pb.SingleMessageMetadata(partition_key="a"), b"x")])
    source = SOURCES[1]
    assert batch_keys_compiled(data, 2, source) is None  # fewer records than announced
    assert batch_keys_compiled(data + b"!", 1, source) is None  # bytes after the last
    assert batch_keys_compiled(data[:-1], 1, source) is None  # payload cut short
    assert batch_keys_compiled(data, -1, source) is None
    no_size = b"\x12\x01a"  # partition_key only: payload_size (required) missing
    assert batch_keys_compiled(struct.pack(">i", len(no_size)) + no_size, 1, source) is None
    group = b"\x1b\x1c\x18\x00"  # a group wire type, then payload_size 0
    assert batch_keys_compiled(struct.pack(">i", len(group)) + group, 1, source) is None


@pytest.mark.parametrize("compression", [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY])
def test_entry_keys_are_the_same_with_and_without_the_compiled_reader(
    compression: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(compression)
    records = [_random_record(rng) for _ in range(50)]
    raw = build_batch(records)
    meta = pb.MessageMetadata(
        producer_name="p",
        sequence_id=0,
        publish_time=1,
        num_messages_in_batch=len(records),
        compression=compression,  # type: ignore[arg-type]
        uncompressed_size=len(raw),
    )
    entry = encode_message(meta, compress(compression, raw))
    with_compiled = [entry_keys(entry, s) for s in SOURCES]
    # A SEND's metadata parsed on arrival: the payload is read in place, same keys; a
    # single writer reads them packed.
    assert [entry_keys(entry, s, parse_message(entry).metadata) for s in SOURCES] == with_compiled
    packed = [PackedKeys.of(keys) if keys is not None else None for keys in with_compiled]
    assert [entry_keys_packed(entry, s, parse_message(entry).metadata) for s in SOURCES] == packed
    monkeypatch.setattr(window, "compiled_keys", None)
    assert [entry_keys(entry, s) for s in SOURCES] == with_compiled
    assert [entry_keys(entry, s, parse_message(entry).metadata) for s in SOURCES] == with_compiled
    assert [entry_keys_packed(entry, s, parse_message(entry).metadata) for s in SOURCES] == packed
    assert batch_keys_compiled(raw, len(records), SOURCES[0]) is None


def test_a_malformed_entry_raises_the_same_error_either_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raw = build_batch([(pb.SingleMessageMetadata(partition_key="a"), b"x")])
    meta = pb.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=2
    )
    entry = encode_message(meta, raw)
    for _ in range(2):  # with the compiled reader, then without it
        with pytest.raises(ProtocolError, match="truncated"):
            entry_keys(entry, SOURCES[1])
        with pytest.raises(ProtocolError, match="truncated"):
            entry_keys_packed(entry, SOURCES[1], parse_message(entry).metadata)
        monkeypatch.setattr(window, "compiled_keys", None)


@needs_compiled
@pytest.mark.parametrize("compression", [pb.NONE, pb.LZ4, pb.ZSTD])
def test_compiled_and_python_kept_records_are_identical(compression: int) -> None:
    rng = random.Random(compression)
    for _ in range(20):
        records = [_random_record(rng) for _ in range(rng.randrange(1, 60))]
        raw = build_batch(records)
        meta = pb.MessageMetadata(
            producer_name="p",
            sequence_id=0,
            publish_time=1,
            num_messages_in_batch=len(records),
            compression=compression,  # type: ignore[arg-type]
            uncompressed_size=len(raw),
        )
        payload = compress(compression, raw)
        keep = [rng.random() < 0.7 for _ in records]
        assert kept_records_compiled(meta, payload, keep) == kept_records(meta, payload, keep)
    # Anything unusual is left to the Python path, which reports it.
    meta.num_messages_in_batch += 1
    assert kept_records_compiled(meta, payload, [*keep, True]) is None
    assert kept_records_compiled(meta, payload, keep) is None


def _block_variants() -> dict[str, tuple[bytes, bool]]:
    """Message blocks a SEND may carry, and whether the compiled reader reads them in
    place (else the Python path does: same keys)."""
    records = []
    for i in range(30):
        record = pb.SingleMessageMetadata(partition_key=f"k{i % 7}")
        if i % 3:
            record.properties.add(key="event-id", value=f"e{i % 11}")
        records.append((record, f"payload {i % 13}".encode()))
    raw = build_batch(records)

    def meta(**fields: object) -> pb.MessageMetadata:
        return pb.MessageMetadata(
            producer_name="p",
            sequence_id=0,
            publish_time=1,
            num_messages_in_batch=len(records),
            uncompressed_size=len(raw),
            **fields,  # type: ignore[arg-type]
        )

    plain = encode_message(meta(), raw)
    no_checksum = meta().SerializeToString()
    encrypted = meta()
    encrypted.encryption_keys.add(key="k", value=b"v")
    return {
        "plain": (plain, True),
        "no checksum": (struct.pack(">I", len(no_checksum)) + no_checksum + raw, True),
        "broker entry metadata": (
            add_broker_entry_metadata(plain, pb.BrokerEntryMetadata(index=5)),
            True,
        ),
        "compressed": (encode_message(meta(compression=pb.LZ4), compress(pb.LZ4, raw)), False),
        "encrypted": (encode_message(encrypted, raw), False),
        "a chunk": (encode_message(meta(num_chunks_from_msg=1), raw), False),
        "a marker": (encode_message(meta(marker_type=1), raw), False),
        "not a batch": (
            encode_message(
                pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), b"x"
            ),
            False,
        ),
        "cut short": (plain[:-3], False),
    }


@needs_compiled
@pytest.mark.parametrize("name", list(_block_variants()))
def test_a_block_is_read_in_place_only_when_its_metadata_allows(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    block, in_place = _block_variants()[name]
    metadata = parse_message(block).metadata
    for source in SOURCES:
        found = window.compiled_keys.block_keys_packed(block, source.code, source.name_bytes)
        assert (found is not None) is in_place
        if in_place:
            assert PackedKeys(*found) == entry_keys_packed(block, source, metadata)
    if name == "cut short":
        with pytest.raises(ProtocolError):
            entry_keys_packed(block, SOURCES[0], metadata)
        return
    keys = [entry_keys_packed(block, s, metadata) for s in SOURCES]
    monkeypatch.setattr(window, "compiled_keys", None)
    assert [entry_keys_packed(block, s, metadata) for s in SOURCES] == keys

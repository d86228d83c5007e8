"""The filesystem offloader: a directory as tiered storage for closed ledgers.

One file per offload attempt, ``{directory}/{cluster}/ledger-{id}-{uid}.offload``:

- ``DBOFFLD1``, then a length-prefixed ``OffloadedLedgerHeader`` (whose ledger, which
  managed ledger, which attempt), so the copy alone says what it is, like a ledger
  topic's header record;
- the entries, each ``timestamp (i64) | length (u32) | bytes``;
- an index (per entry: file offset (u64), timestamp (i64)) and a footer
  ``index offset (u64) | entries (u64) | DBOFFEND``.

A copy is written to ``<name>.tmp``, fsynced, renamed into place and the directory
fsynced: a reader sees a complete copy or none. Calls block (file I/O); the broker runs
them in threads, the deletion worker and the doctor call them directly.
"""

from __future__ import annotations

import os
import re
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlparse

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import ConfigError, StorageError
from dedup_broker.storage import formats
from dedup_broker.storage.values import (
    FILESYSTEM_OFFLOAD_DRIVER,
    OFFLOAD_TEMP_SUFFIX,
    Entry,
    OffloadedHeader,
    Position,
    StoredCopy,
)

MAGIC = b"DBOFFLD1"
END_MAGIC = b"DBOFFEND"
SUFFIX = ".offload"
_LEN = struct.Struct(">I")
_RECORD = struct.Struct(">qI")
_INDEX = struct.Struct(">Qq")
_FOOTER = struct.Struct(">QQ8s")
_NAME = re.compile(r"ledger-(\d+)-([0-9a-f-]{36})\.offload(\.tmp)?")
_MAX_CACHED_INDEXES = 64


class OffloadFormatError(StorageError):
    """A file in the offload directory is not a (complete) offloaded ledger."""


def offload_directory(config: BrokerConfig) -> Path | None:
    """The configured directory, or None when no offload driver is configured."""
    driver = config.managed_ledger_offload_driver.strip().lower()
    if not driver:
        return None
    if driver != FILESYSTEM_OFFLOAD_DRIVER:
        raise ConfigError(f"managedLedgerOffloadDriver {driver!r} is not supported")
    uri = config.file_system_uri.strip()
    if not uri:
        raise ConfigError("managedLedgerOffloadDriver=filesystem needs fileSystemURI")
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme and len(parsed.scheme) > 1:
        raise ConfigError(f"fileSystemURI: only file:// or a path, got {uri!r}")
    return Path(uri)


def offloader_from_config(config: BrokerConfig) -> FilesystemOffloader | None:
    directory = offload_directory(config)
    if directory is None:
        return None
    return FilesystemOffloader(directory, config.cluster_name)


@dataclass(frozen=True, slots=True)
class _Index:
    offsets: list[int]
    timestamps: list[int]
    end: int
    """Offset of the index: the end of the last entry."""


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class OffloadWriter:
    """One copy being written; :meth:`finish` makes it visible, :meth:`abort` drops it."""

    def __init__(self, final: Path, header: OffloadedHeader) -> None:
        self._final = final
        self._temp = final.with_name(final.name + OFFLOAD_TEMP_SUFFIX)
        self._header = header
        final.parent.mkdir(parents=True, exist_ok=True)
        self._file: BinaryIO = open(self._temp, "wb")  # noqa: SIM115 (closed in finish/abort)
        data = formats.encode_offloaded_header(header)
        self._file.write(MAGIC + _LEN.pack(len(data)) + data)
        self._position = len(MAGIC) + _LEN.size + len(data)
        self._index: list[tuple[int, int]] = []
        self._size = 0

    def add(self, entries: Iterable[Entry]) -> None:
        for entry in entries:
            if entry.position.entry_id != len(self._index):
                raise StorageError(
                    f"offload of ledger {self._header.ledger_id}: got entry "
                    f"{entry.position}, expected entry {len(self._index)}"
                )
            record = _RECORD.pack(entry.timestamp_ms, len(entry.data))
            self._file.write(record)
            self._file.write(entry.data)
            self._index.append((self._position, entry.timestamp_ms))
            self._position += len(record) + len(entry.data)
            self._size += len(entry.data)

    def finish(self) -> Path:
        if len(self._index) != self._header.entries:
            self.abort()
            raise StorageError(
                f"offload of ledger {self._header.ledger_id}: {len(self._index)} entries "
                f"written, the ledger has {self._header.entries}"
            )
        index_offset = self._position
        for offset, timestamp in self._index:
            self._file.write(_INDEX.pack(offset, timestamp))
        self._file.write(_FOOTER.pack(index_offset, len(self._index), END_MAGIC))
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self._temp, self._final)
        _fsync_directory(self._final.parent)
        return self._final

    def abort(self) -> None:
        if not self._file.closed:
            self._file.close()
        self._temp.unlink(missing_ok=True)


class FilesystemOffloader:
    driver = FILESYSTEM_OFFLOAD_DRIVER

    def __init__(self, directory: Path, cluster_name: str) -> None:
        self.directory = directory
        self.cluster_name = cluster_name
        self.base = directory / cluster_name
        self._lock = threading.Lock()
        self._indexes: OrderedDict[tuple[int, str], _Index] = OrderedDict()

    def path(self, ledger_id: int, uid: str) -> Path:
        return self.base / f"ledger-{ledger_id}-{uid}{SUFFIX}"

    def begin(self, header: OffloadedHeader) -> OffloadWriter:
        return OffloadWriter(self.path(header.ledger_id, header.uid), header)

    # --- reading ------------------------------------------------------------------
    @staticmethod
    def _read_header_from(file: BinaryIO, path: Path) -> OffloadedHeader:
        start = file.read(len(MAGIC) + _LEN.size)
        if len(start) < len(MAGIC) + _LEN.size or start[: len(MAGIC)] != MAGIC:
            raise OffloadFormatError(f"{path} is not an offloaded ledger")
        (length,) = _LEN.unpack(start[len(MAGIC) :])
        data = file.read(length)
        try:
            return formats.decode_offloaded_header(data)
        except Exception as exc:
            raise OffloadFormatError(f"{path}: unreadable header: {exc}") from None

    def read_header(self, path: Path) -> OffloadedHeader:
        """The copy's own header; FileNotFoundError if it does not exist."""
        with open(path, "rb") as file:
            return self._read_header_from(file, path)

    def _index(self, ledger_id: int, uid: str) -> _Index:
        key = (ledger_id, uid)
        with self._lock:
            index = self._indexes.get(key)
            if index is not None:
                self._indexes.move_to_end(key)
                return index
        path = self.path(ledger_id, uid)
        try:
            with open(path, "rb") as file:
                file.seek(-_FOOTER.size, os.SEEK_END)
                index_offset, count, magic = _FOOTER.unpack(file.read(_FOOTER.size))
                if magic != END_MAGIC:
                    raise OffloadFormatError(f"{path}: no footer (incomplete copy)")
                file.seek(index_offset)
                raw = file.read(count * _INDEX.size)
        except FileNotFoundError:
            raise StorageError(f"offloaded copy {path} of ledger {ledger_id} is missing") from None
        pairs = [_INDEX.unpack_from(raw, i * _INDEX.size) for i in range(count)]
        index = _Index([p[0] for p in pairs], [p[1] for p in pairs], index_offset)
        with self._lock:
            self._indexes[key] = index
            while len(self._indexes) > _MAX_CACHED_INDEXES:
                self._indexes.popitem(last=False)
        return index

    def read(
        self, ledger_id: int, uid: str, first_entry: int, count: int, max_bytes: int
    ) -> list[Entry]:
        """Entries ``first_entry..`` (at most ``count``; at least one, then up to
        ``max_bytes`` of data)."""
        index = self._index(ledger_id, uid)
        last = min(first_entry + count, len(index.offsets))
        if first_entry < 0 or first_entry >= last:
            return []
        entries: list[Entry] = []
        size = 0
        try:
            file = open(self.path(ledger_id, uid), "rb")  # noqa: SIM115
        except FileNotFoundError:
            raise StorageError(f"offloaded copy of ledger {ledger_id} is missing") from None
        with file:
            entry_id = first_entry
            while entry_id < last and (not entries or size < max_bytes):
                file.seek(index.offsets[entry_id])
                timestamp, length = _RECORD.unpack(file.read(_RECORD.size))
                data = file.read(length)
                if len(data) != length:
                    raise OffloadFormatError(f"offloaded ledger {ledger_id}: truncated entry")
                entries.append(Entry(Position(ledger_id, entry_id), data, timestamp))
                size += length
                entry_id += 1
        return entries

    def first_at_or_after(self, ledger_id: int, uid: str, timestamp_ms: int) -> int:
        """Entry id of the first entry with timestamp >= ``timestamp_ms``; -1 if none."""
        for entry_id, stamp in enumerate(self._index(ledger_id, uid).timestamps):
            if stamp >= timestamp_ms:
                return entry_id
        return -1

    # --- listing and deleting -----------------------------------------------------
    def copies(self) -> list[StoredCopy]:
        """Every file of this cluster that looks like an offloaded copy (or a temp)."""
        try:
            names = sorted(os.listdir(self.base))
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            match = _NAME.fullmatch(name)
            if match is not None:
                found.append(
                    StoredCopy(
                        int(match.group(1)), match.group(2), self.base / name, bool(match.group(3))
                    )
                )
        return found

    def forget(self, ledger_id: int, uid: str) -> None:
        with self._lock:
            self._indexes.pop((ledger_id, uid), None)

    def delete(self, ledger_id: int, uid: str) -> bool:
        """Delete the copy (and a leftover temp file); False if neither existed."""
        self.forget(ledger_id, uid)
        final = self.path(ledger_id, uid)
        existed = False
        for path in (final, final.with_name(final.name + OFFLOAD_TEMP_SUFFIX)):
            try:
                path.unlink()
                existed = True
            except FileNotFoundError:
                continue
        if existed:
            _fsync_directory(self.base)
        return existed

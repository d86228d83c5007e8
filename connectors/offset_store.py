"""Where processed message positions live: next to the application's results, in its database.

A store hands out transactions. The consumer runs the application's function and the
position update in the same one, so both commit or neither does. SQLite (the standard
library's ``sqlite3``) is the default; PostgreSQL goes through psycopg 3.

The positions table has one row per ``(consumer_name, topic)`` where ``topic`` is the
partition's own topic name. Rows are created before processing starts and locked at the
start of every transaction (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: ``SELECT ... FOR
UPDATE``), so two processes running the same consumer by mistake still apply each message
once: the second one waits, then sees the position the first one committed.
"""

from __future__ import annotations

import re
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from connectors.positions import NOTHING, Position
from dedup_broker.errors import ConfigError

if TYPE_CHECKING:
    import psycopg

DEFAULT_TABLE = "pulsar_positions"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def _checked_table(name: str) -> str:
    if not _IDENTIFIER.fullmatch(name):
        raise ConfigError(f"table name must be a plain SQL identifier, got {name!r}")
    return name


class PositionStore(ABC):
    """A database connection that keeps positions and runs the application's writes."""

    placeholder: str
    """The driver's parameter marker (``?`` for SQLite, ``%s`` for psycopg)."""

    def __init__(self, table: str = DEFAULT_TABLE) -> None:
        self.table = _checked_table(table)

    @abstractmethod
    def transaction(self) -> Any:
        """A context manager yielding a DB-API cursor inside one transaction.

        Leaving it normally commits; an exception rolls back and propagates. Applications
        may use it too, e.g. to create their result tables before consuming.
        """

    @abstractmethod
    def is_transient(self, exc: BaseException) -> bool:
        """True when ``exc`` is a database failure that may pass (lost connection, lock)."""

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def _create_table_sql(self) -> str: ...

    def _lock_suffix(self) -> str:
        return ""

    def _lock_schema(self, cursor: Any) -> None:
        """Serialize schema creation between processes (where the transaction does not)."""
        return None

    def ensure_schema(self, consumer_name: str, topics: Iterable[str]) -> None:
        """Create the table and one row per partition (at ``NOTHING``) if missing."""
        p = self.placeholder
        with self.transaction() as cur:
            self._lock_schema(cur)
            cur.execute(self._create_table_sql())
            for topic in topics:
                cur.execute(
                    f"INSERT INTO {self.table} "
                    "(consumer_name, topic, ledger_id, entry_id, batch_index) "
                    f"VALUES ({p}, {p}, {p}, {p}, {p}) "
                    "ON CONFLICT (consumer_name, topic) DO NOTHING",
                    (consumer_name, topic, *_columns(NOTHING)),
                )

    def load(self, cursor: Any, consumer_name: str, topics: Sequence[str]) -> dict[str, Position]:
        """The stored positions of ``topics``, locked for the rest of the transaction."""
        p = self.placeholder
        marks = ", ".join([p] * len(topics))
        cursor.execute(
            f"SELECT topic, ledger_id, entry_id, batch_index FROM {self.table} "
            f"WHERE consumer_name = {p} AND topic IN ({marks}) "
            f"ORDER BY topic{self._lock_suffix()}",
            (consumer_name, *topics),
        )
        found = {row[0]: Position(int(row[1]), int(row[2]), int(row[3])) for row in cursor}
        return {topic: found.get(topic, NOTHING) for topic in topics}

    def save(self, cursor: Any, consumer_name: str, topic: str, position: Position) -> None:
        p = self.placeholder
        cursor.execute(
            f"UPDATE {self.table} SET ledger_id = {p}, entry_id = {p}, batch_index = {p}, "
            f"message_id = {p}, updated_at = CURRENT_TIMESTAMP "
            f"WHERE consumer_name = {p} AND topic = {p}",
            (*_columns(position), position.message_id().serialize(), consumer_name, topic),
        )
        if cursor.rowcount != 1:
            cursor.execute(
                f"INSERT INTO {self.table} "
                "(consumer_name, topic, ledger_id, entry_id, batch_index, message_id) "
                f"VALUES ({p}, {p}, {p}, {p}, {p}, {p})",
                (consumer_name, topic, *_columns(position), position.message_id().serialize()),
            )

    def positions(self, consumer_name: str) -> dict[str, Position]:
        """Every stored position of a consumer (without locking), for status and tests."""
        with self.transaction() as cur:
            cur.execute(
                f"SELECT topic, ledger_id, entry_id, batch_index FROM {self.table} "
                f"WHERE consumer_name = {self.placeholder}",
                (consumer_name,),
            )
            return {row[0]: Position(int(row[1]), int(row[2]), int(row[3])) for row in cur}

    def __enter__(self) -> PositionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _columns(position: Position) -> tuple[int, int, int]:
    return (position.ledger_id, position.entry_id, position.batch_index)


class SqlitePositionStore(PositionStore):
    """A SQLite file (WAL journal, full sync): commits survive a process kill and power loss."""

    placeholder = "?"

    def __init__(self, path: str | Path, *, table: str = DEFAULT_TABLE, timeout: float = 30.0):
        super().__init__(table)
        self.path = Path(path)
        self._conn = sqlite3.connect(
            str(self.path), timeout=timeout, isolation_level=None, check_same_thread=False
        )
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")

    @property
    def connection(self) -> sqlite3.Connection:
        return self._conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        cur = self._conn.cursor()
        # IMMEDIATE takes the write lock now, so the positions read below stay true until
        # COMMIT even if another process writes the same database.
        cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur
        except BaseException:
            self._conn.rollback()
            raise
        else:
            cur.execute("COMMIT")
        finally:
            cur.close()

    def is_transient(self, exc: BaseException) -> bool:
        if not isinstance(exc, sqlite3.OperationalError):
            return False
        text = str(exc).lower()
        return "locked" in text or "busy" in text

    def close(self) -> None:
        self._conn.close()

    def _create_table_sql(self) -> str:
        return (
            f"CREATE TABLE IF NOT EXISTS {self.table} ("
            "consumer_name TEXT NOT NULL, topic TEXT NOT NULL, "
            "ledger_id INTEGER NOT NULL, entry_id INTEGER NOT NULL, "
            "batch_index INTEGER NOT NULL, message_id BLOB, "
            "updated_at TEXT DEFAULT CURRENT_TIMESTAMP, "
            "PRIMARY KEY (consumer_name, topic))"
        )


class PostgresPositionStore(PositionStore):
    """A PostgreSQL database through psycopg 3; reconnects when the connection broke."""

    placeholder = "%s"

    def __init__(
        self, conninfo: str, *, table: str = DEFAULT_TABLE, connect_timeout: int = 10
    ) -> None:
        super().__init__(table)
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise ConfigError(
                "PostgreSQL needs the 'psycopg' package (pip install 'psycopg[binary]')"
            ) from exc
        self._psycopg = psycopg
        self.conninfo = conninfo
        self.connect_timeout = connect_timeout
        self._conn: psycopg.Connection[Any] | None = None

    @property
    def connection(self) -> psycopg.Connection[Any]:
        """The live connection, opened again if the previous one broke."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            if self._conn is not None:
                self._conn.close()
            self._conn = self._psycopg.connect(
                self.conninfo, autocommit=True, connect_timeout=self.connect_timeout
            )
        return self._conn

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Cursor[Any]]:
        conn = self.connection
        with conn.transaction(), conn.cursor() as cur:
            yield cur

    def _lock_suffix(self) -> str:
        return " FOR UPDATE"

    def _lock_schema(self, cursor: Any) -> None:
        # Concurrent CREATE TABLE IF NOT EXISTS can still collide in PostgreSQL.
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.table,))

    def is_transient(self, exc: BaseException) -> bool:
        # Lost connections, shutdowns, serialization failures, deadlocks, lock timeouts.
        return isinstance(exc, self._psycopg.OperationalError)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _create_table_sql(self) -> str:
        return (
            f"CREATE TABLE IF NOT EXISTS {self.table} ("
            "consumer_name TEXT NOT NULL, topic TEXT NOT NULL, "
            "ledger_id BIGINT NOT NULL, entry_id BIGINT NOT NULL, "
            "batch_index INTEGER NOT NULL, message_id BYTEA, "
            "updated_at TIMESTAMPTZ DEFAULT CURRENT_TIMESTAMP, "
            "PRIMARY KEY (consumer_name, topic))"
        )


def open_store(target: str | Path | PositionStore, *, table: str = DEFAULT_TABLE) -> PositionStore:
    """A store from a URL or path: ``postgresql://...`` / ``postgres://...`` for PostgreSQL,
    ``sqlite:///path`` or a plain path for SQLite. A store is returned as it is."""
    if isinstance(target, PositionStore):
        return target
    text = str(target)
    if text.startswith(("postgresql://", "postgres://")):
        return PostgresPositionStore(text, table=table)
    if text.startswith("sqlite:///"):
        return SqlitePositionStore(text[len("sqlite:///") :], table=table)
    if "://" in text:
        raise ConfigError(f"unsupported database URL {text!r}: use postgresql:// or sqlite:///")
    return SqlitePositionStore(text, table=table)

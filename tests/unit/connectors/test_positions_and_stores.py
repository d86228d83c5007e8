"""Positions order as the log does; the SQLite store commits results and positions together."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.offset_store import (
    PostgresPositionStore,
    SqlitePositionStore,
    open_store,
)
from connectors.positions import NOTHING, Position, partition_index
from dedup_broker.errors import ConfigError


def test_positions_order_by_ledger_entry_then_batch_index() -> None:
    ordered = [
        NOTHING,
        Position(0, 0, -1),
        Position(0, 1, 0),
        Position(0, 1, 1),
        Position(0, 1, 9),
        Position(0, 2, -1),
        Position(3, 0, 0),
    ]
    assert sorted(reversed(ordered)) == ordered
    assert Position(0, 1, 1) <= Position(0, 1, 1)
    assert NOTHING.is_before_everything and not Position(0, 0).is_before_everything


def test_a_position_turns_back_into_the_clients_ids() -> None:
    position = Position(7, 42, 3)
    assert Position.of(position.message_id()) == position
    start = position.entry_start(2)
    assert (start.ledger_id(), start.entry_id(), start.batch_index(), start.partition()) == (
        7,
        42,
        -1,
        2,
    )


@pytest.mark.parametrize(
    ("topic", "index"),
    [
        ("persistent://public/default/t-partition-3", 3),
        ("persistent://public/default/t", -1),
        ("persistent://public/default/t-partition-x", -1),
        ("-partition-1", -1),
    ],
)
def test_partition_index(topic: str, index: int) -> None:
    assert partition_index(topic) == index


def test_open_store_picks_the_database_from_the_target(tmp_path: Path) -> None:
    with open_store(tmp_path / "a.db") as plain:
        assert isinstance(plain, SqlitePositionStore)
    with open_store(f"sqlite:///{tmp_path}/b.db") as url:
        assert isinstance(url, SqlitePositionStore) and url.path == tmp_path / "b.db"
    assert isinstance(open_store("postgresql://u@127.0.0.1:1/db"), PostgresPositionStore)
    with pytest.raises(ConfigError):
        open_store("mysql://somewhere/db")
    with pytest.raises(ConfigError):
        SqlitePositionStore(tmp_path / "c.db", table="bad name; drop")


def test_results_and_position_commit_together_or_not_at_all(tmp_path: Path) -> None:
    store = SqlitePositionStore(tmp_path / "app.db")
    store.ensure_schema("app", ["t-partition-0", "t-partition-1"])
    store.ensure_schema("app", ["t-partition-0"])  # idempotent
    with store.transaction() as cur:
        cur.execute("CREATE TABLE results (body TEXT)")
    assert store.positions("app") == {"t-partition-0": NOTHING, "t-partition-1": NOTHING}

    with store.transaction() as cur:
        assert store.load(cur, "app", ["t-partition-1"]) == {"t-partition-1": NOTHING}
        cur.execute("INSERT INTO results VALUES ('one')")
        store.save(cur, "app", "t-partition-1", Position(1, 2, 3))

    with pytest.raises(RuntimeError), store.transaction() as cur:
        cur.execute("INSERT INTO results VALUES ('two')")
        store.save(cur, "app", "t-partition-1", Position(1, 2, 4))
        raise RuntimeError("crash before commit")

    reopened = SqlitePositionStore(tmp_path / "app.db")
    with reopened.transaction() as cur:
        cur.execute("SELECT body FROM results")
        assert cur.fetchall() == [("one",)]
    assert reopened.positions("app")["t-partition-1"] == Position(1, 2, 3)
    assert reopened.positions("other") == {}
    reopened.close()
    store.close()


def test_transient_database_errors_are_told_apart(tmp_path: Path) -> None:
    import sqlite3

    with SqlitePositionStore(tmp_path / "x.db") as store:
        assert store.is_transient(sqlite3.OperationalError("database is locked"))
        assert not store.is_transient(sqlite3.OperationalError("no such table: results"))
        assert not store.is_transient(sqlite3.IntegrityError("UNIQUE constraint failed"))
        assert not store.is_transient(ValueError("bad input"))

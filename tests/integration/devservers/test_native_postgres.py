"""The native PostgreSQL launcher: a real server on 127.0.0.1, data kept across a restart
and a SIGKILL, nothing left behind; never run as root."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from dedup_broker.devservers import NativePostgres
from dedup_broker.devservers.process import pid_alive, port_accepts
from dedup_broker.errors import DevServerError

pytestmark = pytest.mark.timeout(180)


def test_start_restart_kill_and_close() -> None:
    server = NativePostgres()  # under the temp dir, which the server's user can reach
    try:
        server.start()
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (n INTEGER)")
            conn.execute("INSERT INTO kept VALUES (1)")
            user = conn.execute("SELECT current_setting('listen_addresses')").fetchone()
        assert user == ("127.0.0.1",)
        pid = server.pid
        assert pid is not None
        owner = Path(f"/proc/{pid}").stat().st_uid
        assert owner != 0 or os.geteuid() != 0, "PostgreSQL must not run as root"

        server.stop()
        assert not pid_alive(pid) and not port_accepts(server.port)
        server.start()
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("INSERT INTO kept VALUES (2)")
        server.kill()
        server.start()
        with psycopg.connect(server.url, autocommit=True) as conn:
            assert conn.execute("SELECT n FROM kept ORDER BY n").fetchall() == [(1,), (2,)]
    finally:
        server.close()
    assert not server.running
    assert not server.data_dir.exists()


def test_a_data_dir_the_server_user_cannot_reach_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root hands the server to another user")
    tmp_path.chmod(0o700)
    with pytest.raises(DevServerError, match="cannot enter"):
        NativePostgres(tmp_path / "pg").start()

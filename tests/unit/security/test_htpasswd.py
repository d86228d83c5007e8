"""htpasswd files as Pulsar reads them: hashes written by Apache's ``htpasswd`` tool
(``-m`` Apache MD5, ``-d`` crypt, ``-B`` bcrypt)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from dedup_broker.errors import ConfigError
from dedup_broker.security.htpasswd import (
    HashScheme,
    apr1_crypt,
    parse_htpasswd,
    password_matches,
    scheme_of,
)
from tests.integration.compat.secured_standalone import BASIC_USERS, write_htpasswd

# Written by Apache's htpasswd 2.4 (htpasswd -nbm / -nbd / -nbB user password).
WRITTEN_BY_HTPASSWD = [
    ("alice-pw", "$apr1$7wbt0.dk$MRxdf/tSZZYuvXZgENt.r1", HashScheme.APR1),
    ("", "$apr1$zKwOIlr4$etCctJNeqwVspBtRaEghv/", HashScheme.APR1),
    (
        "a much longer password that spans more than sixteen bytes",
        "$apr1$d3fHG5TS$YwBePsmciEFMgSNZGMuRD/",
        HashScheme.APR1,
    ),
    ("bob-pw", "KK4h5oau4XqFo", HashScheme.DES_CRYPT),
    (
        "erin-pw",
        "$2y$05$eYxJFKvX8tmaqHOJ8Pn7wuUwQVr9NiBbs3UmHUqli7j5kj707TVsq",
        HashScheme.BCRYPT,
    ),
]


@pytest.mark.parametrize(("password", "hashed", "scheme"), WRITTEN_BY_HTPASSWD)
def test_passwords_hashed_by_htpasswd_match(password: str, hashed: str, scheme: str) -> None:
    assert scheme_of(hashed) == scheme
    assert password_matches(password.encode(), hashed)
    assert not password_matches(password.encode() + b"x", hashed)


def test_apr1_reproduces_htpasswd_from_the_salt() -> None:
    assert apr1_crypt(b"alice-pw", "7wbt0.dk") == "$apr1$7wbt0.dk$MRxdf/tSZZYuvXZgENt.r1"


def test_a_file_with_every_scheme_reads() -> None:
    text = "\n".join(
        ["# users", ""] + [f"u{i}:{hashed}" for i, (_, hashed, _) in enumerate(WRITTEN_BY_HTPASSWD)]
    )
    users = parse_htpasswd(text + "\n")
    assert list(users) == [f"u{i}" for i in range(len(WRITTEN_BY_HTPASSWD))]


@pytest.mark.parametrize("line", ["alice:plaintext", "alice", ":$apr1$x$y", "alice:{SHA}abc="])
def test_unknown_formats_stop_the_broker(line: str) -> None:
    with pytest.raises(ConfigError, match="line 1"):
        parse_htpasswd(line)


HTPASSWD = shutil.which("htpasswd")
needs_htpasswd = pytest.mark.skipif(
    HTPASSWD is None, reason="Apache's htpasswd (apache2-utils) is not installed"
)


@needs_htpasswd
@pytest.mark.parametrize("password", ["carol-secret", "", "ünïcødé and spaces, 30+ bytes long"])
def test_apr1_matches_the_installed_htpasswd(password: str) -> None:
    """Where the real binary is installed, its fresh hashes are reproduced from their salt."""
    assert HTPASSWD is not None
    line = subprocess.run(
        [HTPASSWD, "-nbm", "user", password], capture_output=True, text=True, check=True
    ).stdout.strip()
    hashed = line.split(":", 1)[1]
    salt = hashed.removeprefix("$apr1$").split("$")[0]
    assert apr1_crypt(password.encode(), salt) == hashed
    assert password_matches(password.encode(), hashed)


@needs_htpasswd
def test_the_secured_setups_file_passes_htpasswd_verify(tmp_path: Path) -> None:
    """The file the secured-setup tests write (no binary needed) is one the real
    ``htpasswd -v`` accepts, user by user."""
    assert HTPASSWD is not None
    path = tmp_path / ".htpasswd"
    write_htpasswd(path)
    for user, password in BASIC_USERS.items():
        subprocess.run([HTPASSWD, "-vb", str(path), user, password], check=True)
        wrong = subprocess.run(
            [HTPASSWD, "-vb", str(path), user, password + "x"], capture_output=True, check=False
        )
        assert wrong.returncode != 0

"""htpasswd files as Pulsar reads them: hashes written by Apache's ``htpasswd`` tool
(``-m`` Apache MD5, ``-d`` crypt, ``-B`` bcrypt)."""

from __future__ import annotations

import pytest

from dedup_broker.errors import ConfigError
from dedup_broker.security.htpasswd import (
    HashScheme,
    apr1_crypt,
    parse_htpasswd,
    password_matches,
    scheme_of,
)

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

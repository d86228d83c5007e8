"""Apache htpasswd files as Pulsar's ``AuthenticationProviderBasic`` reads them.

Pulsar accepts two hash formats in ``basicAuthConf``: Apache's MD5 (``$apr1$``, what
``htpasswd -m`` writes and Pulsar's documentation shows) and the traditional crypt(3)
DES hash (``htpasswd -d``). bcrypt (``htpasswd -B``) is accepted here as well. APR1 is
computed here from its definition (the FreeBSD MD5-crypt rounds with the magic
``$apr1$``); DES crypt and the glibc ``$1$``/``$5$``/``$6$`` hashes are the C library's.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import sys
import warnings
from collections.abc import Callable
from enum import StrEnum

import bcrypt

from dedup_broker.errors import ConfigError

if sys.version_info >= (3, 13):  # pragma: no cover - the module left the standard library
    import crypt_r as _crypt
else:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt as _crypt

ITOA64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
APR1_MAGIC = "$apr1$"
DES_HASH = re.compile(r"[./0-9A-Za-z]{13}")
LIBC_HASH = re.compile(r"\$(1|5|6)\$[^$]*\$?[./0-9A-Za-z]*")


class HashScheme(StrEnum):
    """The hash formats a ``basicAuthConf`` line may use."""

    APR1 = "apr1"
    DES_CRYPT = "crypt"
    BCRYPT = "bcrypt"
    LIBC_CRYPT = "libc-crypt"


def _to64(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        chars.append(ITOA64[value & 0x3F])
        value >>= 6
    return "".join(chars)


def apr1_crypt(password: bytes, salt: str) -> str:
    """Apache's MD5 hash of ``password`` with ``salt`` (at most 8 characters):
    ``$apr1$<salt>$<22 characters>``."""
    salt = salt[:8]
    salt_bytes = salt.encode()
    magic = APR1_MAGIC.encode()
    alternate = hashlib.md5(password + salt_bytes + password).digest()
    context = bytearray(password + magic + salt_bytes)
    remaining = len(password)
    while remaining > 0:
        context += alternate[: min(16, remaining)]
        remaining -= 16
    length = len(password)
    while length:
        context += b"\0" if length & 1 else password[:1]
        length >>= 1
    digest = hashlib.md5(context).digest()
    for round_number in range(1000):
        step = bytearray(password if round_number & 1 else digest)
        if round_number % 3:
            step += salt_bytes
        if round_number % 7:
            step += password
        step += digest if round_number & 1 else password
        digest = hashlib.md5(step).digest()
    groups = ((0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5))
    encoded = "".join(
        _to64((digest[a] << 16) | (digest[b] << 8) | digest[c], 4) for a, b, c in groups
    )
    return f"{APR1_MAGIC}{salt}${encoded}{_to64(digest[11], 2)}"


def scheme_of(hashed: str) -> HashScheme | None:
    """The scheme of a stored hash; None for a format no provider reads."""
    if hashed.startswith(APR1_MAGIC) and hashed.count("$") == 3:
        return HashScheme.APR1
    if hashed.startswith(("$2y$", "$2b$", "$2a$")):
        return HashScheme.BCRYPT
    if DES_HASH.fullmatch(hashed):
        return HashScheme.DES_CRYPT
    if LIBC_HASH.fullmatch(hashed):
        return HashScheme.LIBC_CRYPT
    return None


def _check_apr1(password: bytes, hashed: str) -> bool:
    salt = hashed.split("$")[2]
    return hmac.compare_digest(apr1_crypt(password, salt), hashed)


def _check_bcrypt(password: bytes, hashed: str) -> bool:
    return bcrypt.checkpw(password, hashed.replace("$2y$", "$2b$", 1).encode())


def _check_libc(password: bytes, hashed: str) -> bool:
    computed = _crypt.crypt(password.decode("utf-8", "replace"), hashed)
    return computed is not None and hmac.compare_digest(computed, hashed)


CHECKERS: dict[HashScheme, Callable[[bytes, str], bool]] = {
    HashScheme.APR1: _check_apr1,
    HashScheme.BCRYPT: _check_bcrypt,
    HashScheme.DES_CRYPT: _check_libc,
    HashScheme.LIBC_CRYPT: _check_libc,
}


def password_matches(password: bytes, hashed: str) -> bool:
    """Whether ``password`` hashes to the stored ``hashed`` (any scheme of HashScheme)."""
    scheme = scheme_of(hashed)
    return scheme is not None and CHECKERS[scheme](password, hashed)


def parse_htpasswd(text: str) -> dict[str, str]:
    """``user:hash`` lines (blank lines and ``#`` comments skipped); a line in another
    format stops the broker at start, naming it."""
    users: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        user, sep, hashed = line.strip().partition(":")
        if not sep or not user or scheme_of(hashed) is None:
            raise ConfigError(
                f"basicAuthConf line {number}: expected user:hash with an Apache MD5 "
                "($apr1$, htpasswd -m), crypt (htpasswd -d) or bcrypt (htpasswd -B) hash"
            )
        users[user] = hashed
    return users

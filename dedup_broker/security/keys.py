"""Token keys in Pulsar's forms: ``data:;base64,<key>``, ``file:///path``, or base64."""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization

from dedup_broker.errors import ConfigError

SECRET_ALGORITHMS = ("HS256", "HS384", "HS512")
PUBLIC_ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")


def read_key_bytes(value: str, what: str) -> bytes:
    """The raw bytes a key setting names (Pulsar's ``data:`` and ``file:`` forms)."""
    text = value.strip()
    try:
        if text.startswith("data:"):
            _, _, payload = text.partition(",")
            return base64.b64decode(payload, validate=True)
        if text.startswith("file://"):
            return Path(text.removeprefix("file://")).read_bytes()
        return base64.b64decode(text, validate=True)
    except (OSError, binascii.Error, ValueError) as exc:
        raise ConfigError(f"{what}: cannot read the key ({exc})") from exc


def load_public_key(data: bytes, what: str) -> Any:
    """A public key in PEM or DER (X.509 SubjectPublicKeyInfo, as Pulsar writes it)."""
    try:
        if data.lstrip().startswith(b"-----"):
            return serialization.load_pem_public_key(data)
        return serialization.load_der_public_key(data)
    except ValueError as exc:
        raise ConfigError(f"{what}: not a public key in PEM or DER ({exc})") from exc


def load_private_key(data: bytes, what: str) -> Any:
    """A private key in PEM or DER (PKCS#8, as Pulsar writes it)."""
    try:
        if data.lstrip().startswith(b"-----"):
            return serialization.load_pem_private_key(data, password=None)
        return serialization.load_der_private_key(data, password=None)
    except ValueError as exc:
        raise ConfigError(f"{what}: not a private key in PEM or DER ({exc})") from exc

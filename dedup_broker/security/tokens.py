"""``dedup-broker tokens``: keys and tokens for the token provider, like ``pulsar tokens``.

Keys are written in Pulsar's formats (a raw secret key; DER PKCS#8 private and X.509
public keys), so keys made by either tool work with both.
"""

from __future__ import annotations

import argparse
import base64
import re
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from dedup_broker.errors import ConfigError
from dedup_broker.security.keys import load_private_key, load_public_key, read_key_bytes

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def parse_duration(text: str) -> int:
    """``30s``, ``10m``, ``1h``, ``7d``, ``1y`` (or plain seconds) in seconds."""
    match = re.fullmatch(r"(\d+)([smhdwy]?)", text.strip())
    if match is None:
        raise ConfigError(f"--expiry-time: expected e.g. 30s, 10m, 1h, 7d, 1y; got {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2) or "s"]


def _key_argument(value: str) -> str:
    """A key option: Pulsar's forms, or a plain path."""
    if value.startswith(("data:", "file://")):
        return value
    return "file://" + str(Path(value).resolve())


def _write(path: str | None, data: bytes) -> None:
    if path is None:
        sys.stdout.buffer.write(data + (b"" if data.endswith(b"\n") else b"\n"))
    else:
        Path(path).write_bytes(data)


def create_secret_key(args: argparse.Namespace) -> int:
    key = secrets.token_bytes(32)
    _write(args.output, base64.b64encode(key) if args.base64 else key)
    return 0


def create_key_pair(args: argparse.Namespace) -> int:
    private: Any
    if args.algorithm.startswith("RS"):
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    else:
        curve = {"ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}
        private = ec.generate_private_key(curve[args.algorithm])
    _write(
        args.output_private_key,
        private.private_bytes(
            serialization.Encoding.DER,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    _write(
        args.output_public_key,
        private.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    return 0


def create_token(args: argparse.Namespace) -> int:
    claims: dict[str, Any] = {"sub": args.subject}
    if args.expiry_time:
        claims["exp"] = int(time.time()) + parse_duration(args.expiry_time)
    if args.secret_key:
        key: Any = read_key_bytes(_key_argument(args.secret_key), "--secret-key")
        algorithm = args.algorithm or "HS256"
    elif args.private_key:
        raw = read_key_bytes(_key_argument(args.private_key), "--private-key")
        key = load_private_key(raw, "--private-key")
        algorithm = args.algorithm or ("RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256")
    else:
        raise ConfigError("tokens create: give --secret-key or --private-key")
    print(jwt.encode(claims, key, algorithm=algorithm))
    return 0


def validate_token(args: argparse.Namespace) -> int:
    token = args.token or sys.stdin.read().strip()
    if args.secret_key:
        key: Any = read_key_bytes(_key_argument(args.secret_key), "--secret-key")
        algorithms = ["HS256", "HS384", "HS512"]
    elif args.public_key:
        key = load_public_key(read_key_bytes(_key_argument(args.public_key), "--public-key"), "")
        algorithms = ["RS256", "RS384", "RS512", "ES256", "ES384", "ES512"]
    else:
        raise ConfigError("tokens validate: give --secret-key or --public-key")
    try:
        claims = jwt.decode(token, key, algorithms=algorithms, options={"verify_aud": False})
    except jwt.InvalidTokenError as exc:
        print(f"invalid token: {exc}", file=sys.stderr)
        return 1
    print(claims)
    return 0


def add_tokens_command(commands: Any) -> None:
    tokens = commands.add_parser("tokens", help="keys and tokens for token authentication")
    sub = tokens.add_subparsers(dest="tokens_command", required=True)

    secret = sub.add_parser("create-secret-key", help="a random HS256 secret key")
    secret.add_argument("-o", "--output", help="file to write (default: standard output)")
    secret.add_argument("-b", "--base64", action="store_true", help="write it base64-encoded")
    secret.set_defaults(func=create_secret_key)

    pair = sub.add_parser("create-key-pair", help="an RSA or EC key pair (DER)")
    pair.add_argument(
        "-a", "--algorithm", default="RS256", choices=["RS256", "ES256", "ES384", "ES512"]
    )
    pair.add_argument("--output-private-key", required=True)
    pair.add_argument("--output-public-key", required=True)
    pair.set_defaults(func=create_key_pair)

    create = sub.add_parser("create", help="a token for a role")
    create.add_argument("-s", "--subject", required=True, help="the role")
    create.add_argument("-e", "--expiry-time", help="e.g. 1h, 7d, 1y (default: never)")
    create.add_argument("-sk", "--secret-key", help="data:;base64,..., file:///path or a path")
    create.add_argument("-pk", "--private-key", help="data:;base64,..., file:///path or a path")
    create.add_argument("-a", "--algorithm", help="default HS256 / RS256 / ES256 by key")
    create.set_defaults(func=create_token)

    validate = sub.add_parser("validate", help="check a token and print its claims")
    validate.add_argument("-i", "--token", help="the token (default: standard input)")
    validate.add_argument("-sk", "--secret-key")
    validate.add_argument("-pk", "--public-key")
    validate.set_defaults(func=validate_token)

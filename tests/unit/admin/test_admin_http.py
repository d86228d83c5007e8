"""The admin HTTP server over real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import re
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest

from dedup_broker.admin.http import (
    HttpError,
    HttpServer,
    Request,
    Response,
    Router,
    json_response,
    no_content,
    text_response,
)

pytestmark = pytest.mark.timeout(30)

_DATE = re.compile(rb"Date: [^\r]*\r\n")


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 20))


@asynccontextmanager
async def serving(router: Router, **options: Any) -> AsyncIterator[HttpServer]:
    server = HttpServer(router, "127.0.0.1", 0, **options)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@asynccontextmanager
async def connect(
    server: HttpServer,
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        yield reader, writer
    finally:
        writer.close()


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response: status, headers (lower-case names, Date removed), body."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head[:-4].decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(": ")
        headers[name.lower()] = value
    assert "date" in headers
    del headers["date"]
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


async def exchange(server: HttpServer, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    async with connect(server) as (reader, writer):
        writer.write(raw)
        return await read_response(reader)


def reason(body: bytes) -> str:
    parsed = json.loads(body)
    assert list(parsed) == ["reason"]
    return str(parsed["reason"])


async def echo(request: Request) -> Response:
    return json_response(
        {
            "method": request.method,
            "path": request.path,
            "params": request.params,
            "query": request.query,
        }
    )


def make_router() -> Router:
    router = Router()
    # The general route is registered first: specificity, not order, must decide.
    router.add("GET", "/admin/v2/persistent/{tenant}/{namespace}/{topic:path}", echo)
    router.add("GET", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/stats", echo)
    router.add("PUT", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/partitions", echo)
    router.add("GET", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/partitions", echo)
    router.add("GET", "/admin/v2/persistent/public/{namespace}/{topic}/stats", echo)
    return router


def test_exact_response_bytes() -> None:
    async def main() -> None:
        router = Router()

        async def hello(request: Request) -> Response:
            return json_response({"hello": "wörld"}, 201)

        router.add("GET", "/hello", hello)
        async with serving(router) as server, connect(server) as (reader, writer):
            writer.write(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            assert _DATE.sub(b"", head) == (
                b"HTTP/1.1 201 Created\r\n"
                b"Content-Type: application/json\r\n"
                b"Content-Length: 19\r\n"
                b"Connection: keep-alive\r\n\r\n"
            )
            assert await reader.readexactly(19) == '{"hello": "wörld"}'.encode()

    run(main())


def test_path_params_rest_params_and_decoding() -> None:
    async def main() -> None:
        async with serving(make_router()) as server:
            status, _, body = await exchange(
                server,
                b"GET /admin/v2/persistent/acme/ns/my%20topic%2Fx/stats?a=1&a=2&b= HTTP/1.1\r\n"
                b"Host: x\r\n\r\n",
            )
            assert status == 200
            assert json.loads(body) == {
                "method": "GET",
                "path": "/admin/v2/persistent/acme/ns/my%20topic%2Fx/stats",
                "params": {"tenant": "acme", "namespace": "ns", "topic": "my topic/x"},
                "query": {"a": ["1", "2"], "b": [""]},
            }
            # Literal "public" beats {tenant}, though registered last.
            _, _, body = await exchange(
                server, b"GET /admin/v2/persistent/public/ns/t/stats HTTP/1.1\r\n\r\n"
            )
            assert json.loads(body)["params"] == {"namespace": "ns", "topic": "t"}
            # {topic:path} takes several segments, each decoded.
            _, _, body = await exchange(
                server, b"GET /admin/v2/persistent/acme/ns/a/b%3Ac/internalStats HTTP/1.1\r\n\r\n"
            )
            assert json.loads(body)["params"] == {
                "tenant": "acme",
                "namespace": "ns",
                "topic": "a/b:c/internalStats",
            }

    run(main())


def test_router_specificity_independent_of_registration_order() -> None:
    async def general(request: Request) -> Response:
        return text_response("general")

    async def specific(request: Request) -> Response:
        return text_response("specific")

    for order in ((general, specific), (specific, general)):
        router = Router()
        for registered in order:
            pattern = "/a/{x}/b" if registered is specific else "/a/{rest:path}"
            router.add("GET", pattern, registered)
        handler, params = router.resolve("GET", "/a/1/b")
        assert handler is specific and params == {"x": "1"}
        handler, params = router.resolve("GET", "/a/1/c")
        assert handler is general and params == {"rest": "1/c"}
        handler, params = router.resolve("GET", "/a/1/b/")  # one trailing slash is ignored
        assert handler is specific


def test_404_and_405() -> None:
    async def main() -> None:
        async with serving(make_router()) as server, connect(server) as (reader, writer):
            writer.write(b"GET /admin/v3/nothing HTTP/1.1\r\n\r\n")
            status, headers, body = await read_response(reader)
            assert (status, reason(body)) == (404, "no resource at /admin/v3/nothing")
            assert headers["connection"] == "keep-alive"
            writer.write(b"DELETE /admin/v2/persistent/t/n/x/partitions HTTP/1.1\r\n\r\n")
            status, headers, body = await read_response(reader)
            assert (status, reason(body)) == (405, "method DELETE not allowed")
            assert headers["allow"] == "GET, PUT"
            # A segment parameter never matches an empty segment.
            writer.write(b"GET /admin/v2/persistent/t//x/stats HTTP/1.1\r\n\r\n")
            status, _, _ = await read_response(reader)
            assert status == 404

    run(main())


def test_json_body_round_trip_and_invalid_json() -> None:
    async def main() -> None:
        router = Router()

        async def partitions(request: Request) -> Response:
            return json_response({"received": request.json(), "params": request.params})

        router.add(
            "PUT", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/partitions", partitions
        )
        async with serving(router) as server, connect(server) as (reader, writer):
            payload = json.dumps({"partitions": 4, "name": "ünï"}).encode()
            writer.write(
                b"PUT /admin/v2/persistent/t/n/x/partitions HTTP/1.1\r\n"
                b"Content-Type: application/json\r\n"
                b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload
            )
            status, _, body = await read_response(reader)
            assert status == 200
            assert json.loads(body) == {
                "received": {"partitions": 4, "name": "ünï"},
                "params": {"tenant": "t", "namespace": "n", "topic": "x"},
            }
            writer.write(
                b"PUT /admin/v2/persistent/t/n/x/partitions HTTP/1.1\r\n"
                b"Content-Length: 5\r\n\r\n{oops"
            )
            status, headers, body = await read_response(reader)
            assert status == 400
            assert reason(body).startswith("request body is not valid JSON")
            assert headers["connection"] == "keep-alive"

    run(main())


def test_keep_alive_two_requests_then_pipelined() -> None:
    async def main() -> None:
        async with serving(make_router()) as server, connect(server) as (reader, writer):
            writer.write(b"GET /admin/v2/persistent/t/n/one/stats HTTP/1.1\r\n\r\n")
            _, _, first = await read_response(reader)
            writer.write(b"GET /admin/v2/persistent/t/n/two/stats HTTP/1.1\r\n\r\n")
            _, _, second = await read_response(reader)
            assert [json.loads(b)["params"]["topic"] for b in (first, second)] == ["one", "two"]
            writer.write(
                b"GET /admin/v2/persistent/t/n/three/stats HTTP/1.1\r\n\r\n"
                b"GET /admin/v2/persistent/t/n/four/stats HTTP/1.1\r\nConnection: close\r\n\r\n"
            )
            _, headers3, third = await read_response(reader)
            _, headers4, fourth = await read_response(reader)
            assert [json.loads(b)["params"]["topic"] for b in (third, fourth)] == [
                "three",
                "four",
            ]
            assert (headers3["connection"], headers4["connection"]) == ("keep-alive", "close")
            assert await reader.read() == b""

    run(main())


def test_http_10_closes_unless_keep_alive_requested() -> None:
    async def main() -> None:
        async with serving(make_router()) as server:
            async with connect(server) as (reader, writer):
                writer.write(b"GET /admin/v2/persistent/t/n/x/stats HTTP/1.0\r\n\r\n")
                _, headers, _ = await read_response(reader)
                assert headers["connection"] == "close"
                assert await reader.read() == b""
            async with connect(server) as (reader, writer):
                writer.write(
                    b"GET /admin/v2/persistent/t/n/x/stats HTTP/1.0\r\n"
                    b"Connection: Keep-Alive\r\n\r\n"
                )
                _, headers, _ = await read_response(reader)
                assert headers["connection"] == "keep-alive"

    run(main())


@pytest.mark.parametrize(
    ("raw", "status", "expected_reason"),
    [
        (b"GARBAGE\r\n\r\n", 400, "malformed request line"),
        (b"GET /x HTTP/1.1 extra\r\n\r\n", 400, "malformed request line"),
        (b"G(T /x HTTP/1.1\r\n\r\n", 400, "malformed request method"),
        (b"GET /x FTP/1.1\r\n\r\n", 400, "malformed HTTP version"),
        (b"GET /x HTTP/2.0\r\n\r\n", 505, "HTTP version HTTP/2.0 not supported"),
        (b"GET /x HTTP/1.1\r\nNo-Colon\r\n\r\n", 400, "malformed header line"),
        (b"GET /x HTTP/1.1\r\nBad Name: v\r\n\r\n", 400, "malformed header line"),
        (b"GET x HTTP/1.1\r\n\r\n", 400, "unsupported request target 'x'"),
        (
            b"POST /x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
            "both Transfer-Encoding and Content-Length are present",
        ),
        (b"POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "invalid Content-Length '-1'"),
        (
            b"POST /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
            400,
            "repeated Content-Length header",
        ),
        (
            b"POST /x HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            501,
            "unsupported transfer coding 'gzip'",
        ),
        (
            b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            400,
            "malformed chunk size",
        ),
    ],
)
def test_malformed_requests_get_an_error_and_the_connection_closes(
    raw: bytes, status: int, expected_reason: str
) -> None:
    async def main() -> None:
        async with serving(make_router()) as server, connect(server) as (reader, writer):
            writer.write(raw)
            got_status, headers, body = await read_response(reader)
            assert (got_status, reason(body)) == (status, expected_reason)
            assert headers["connection"] == "close"
            assert await reader.read() == b""

    run(main())


def test_oversized_bodies_get_413() -> None:
    async def main() -> None:
        router = Router()

        async def accept(request: Request) -> Response:
            return json_response(len(request.body))

        router.add("POST", "/body", accept)
        async with serving(router, max_body_bytes=1024) as server:
            status, _, body = await exchange(
                server, b"POST /body HTTP/1.1\r\nContent-Length: 1024\r\n\r\n" + b"x" * 1024
            )
            assert (status, body) == (200, b"1024")
            # The whole oversized body is sent: the 413 must still arrive intact.
            async with connect(server) as (reader, writer):
                writer.write(b"POST /body HTTP/1.1\r\nContent-Length: 200000\r\n\r\n")
                writer.write(b"x" * 200000)
                status, headers, body = await read_response(reader)
                assert (status, reason(body)) == (413, "request body larger than 1024 bytes")
                assert headers["connection"] == "close"
            chunk = b"400\r\n" + b"y" * 1024 + b"\r\n"
            status, _, body = await exchange(
                server,
                b"POST /body HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk + chunk,
            )
            assert (status, reason(body)) == (413, "request body larger than 1024 bytes")

    run(main())


def test_oversized_header_section_gets_431() -> None:
    async def main() -> None:
        async with serving(make_router()) as server:
            status, headers, body = await exchange(
                server, b"GET /x HTTP/1.1\r\nX-Big: " + b"a" * 17000 + b"\r\n\r\n"
            )
            assert (status, reason(body)) == (431, "request header section larger than 16384 bytes")
            assert headers["connection"] == "close"

    run(main())


def test_chunked_body_and_expect_100_continue() -> None:
    async def main() -> None:
        router = Router()

        async def accept(request: Request) -> Response:
            return text_response(request.text())

        router.add("POST", "/text", accept)
        async with serving(router) as server, connect(server) as (reader, writer):
            writer.write(
                b"POST /text HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n"
            )
            status, headers, body = await read_response(reader)
            assert (status, body) == (200, b"hello, world")
            assert headers["content-type"] == "text/plain; version=0.0.4"
            writer.write(
                b"POST /text HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"
            )
            assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
            writer.write(b"body")
            status, _, body = await read_response(reader)
            assert (status, body) == (200, b"body")

    run(main())


def test_handler_exception_gives_500_and_the_server_keeps_serving(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        router = Router()

        async def broken(request: Request) -> Response:
            raise RuntimeError("ledger store unavailable")

        async def refused(request: Request) -> Response:
            raise HttpError(409, "Partitioned topic already exists")

        async def empty(request: Request) -> Response:
            return no_content()

        router.add("GET", "/broken", broken)
        router.add("GET", "/refused", refused)
        router.add("DELETE", "/empty", empty)
        async with serving(router) as server, connect(server) as (reader, writer):
            writer.write(b"GET /broken HTTP/1.1\r\n\r\n")
            status, headers, body = await read_response(reader)
            assert (status, reason(body)) == (500, "ledger store unavailable")
            assert headers["connection"] == "keep-alive"
            writer.write(b"GET /refused HTTP/1.1\r\n\r\n")
            status, _, body = await read_response(reader)
            assert (status, reason(body)) == (409, "Partitioned topic already exists")
            writer.write(b"DELETE /empty HTTP/1.1\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            assert _DATE.sub(b"", head) == (
                b"HTTP/1.1 204 No Content\r\nConnection: keep-alive\r\n\r\n"
            )
            # Another connection is unaffected as well.
            status, _, _ = await exchange(server, b"GET /refused HTTP/1.1\r\n\r\n")
            assert status == 409

    with caplog.at_level(logging.ERROR, logger="dedup_broker.admin.http"):
        run(main())
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(failures) == 1
    assert failures[0].getMessage() == "admin handler for GET /broken failed"
    assert failures[0].exc_info is not None


def test_bad_response_from_handler_is_a_500() -> None:
    async def main() -> None:
        router = Router()

        async def injected(request: Request) -> Response:
            return Response(200, b"", headers={"X-Bad": "a\r\nSet-Cookie: x"})

        router.add("GET", "/injected", injected)
        async with serving(router) as server:
            status, headers, body = await exchange(server, b"GET /injected HTTP/1.1\r\n\r\n")
            assert status == 500
            assert "set-cookie" not in headers
            assert reason(body).startswith("invalid response header 'X-Bad'")

    run(main())


def test_stdlib_client_interoperates() -> None:
    async def main() -> None:
        async with serving(make_router()) as server:

            def fetch() -> tuple[int, Any, Any]:
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
                conn.request("GET", "/admin/v2/persistent/t/n/a%2Fb/stats")
                first = conn.getresponse()
                first_body = json.loads(first.read())
                conn.request("PUT", "/admin/v2/persistent/t/n/x/partitions", body=b"4")
                second = conn.getresponse()
                second_body = json.loads(second.read())
                conn.close()
                return first.status, first_body["params"]["topic"], second_body["method"]

            assert await asyncio.to_thread(fetch) == (200, "a/b", "PUT")

    run(main())


def test_idle_connections_time_out_and_stop_closes_connections() -> None:
    async def main() -> None:
        server = HttpServer(make_router(), "127.0.0.1", 0, idle_timeout=0.2)
        await server.start()
        assert server.port > 0
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed for idleness
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /admin/v2/persistent/t/n/x/stats HTTP/1.1\r\n\r\n")
        await read_response(reader)
        await server.stop()
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", server.port)

    run(main())


def test_stop_lets_an_in_flight_request_finish() -> None:
    async def main() -> None:
        router = Router()
        started = asyncio.Event()

        async def slow(request: Request) -> Response:
            started.set()
            await asyncio.sleep(0.2)
            return text_response("done")

        router.add("GET", "/slow", slow)
        server = HttpServer(router, "127.0.0.1", 0, shutdown_grace=5)
        await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /slow HTTP/1.1\r\n\r\n")
        await started.wait()
        await server.stop()
        status, headers, body = await read_response(reader)
        assert (status, headers["connection"], body) == (200, "close", b"done")
        writer.close()

    run(main())


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("admin", "must start with '/'"),
        ("/a/{rest:path}/b", "must be the last segment"),
        ("/a/{x}/{x}", "duplicate parameter"),
        ("/a/pre{x}", "invalid segment"),
        ("/a//b", "invalid segment"),
    ],
)
def test_invalid_patterns_are_refused(pattern: str, message: str) -> None:
    async def handler(request: Request) -> Response:
        return no_content()

    with pytest.raises(ValueError, match=re.escape(message)):
        Router().add("GET", pattern, handler)


def test_clashing_routes_are_refused() -> None:
    async def handler(request: Request) -> Response:
        return no_content()

    router = Router()
    router.add("GET", "/a/{x}", handler)
    router.add("PUT", "/a/{x}", handler)
    with pytest.raises(ValueError, match="clashes"):
        router.add("get", "/a/{y}", handler)
    router.add("GET", "/metrics/", handler)
    assert router.resolve("GET", "/metrics") == (handler, {})
    with pytest.raises(ValueError, match="clashes"):
        router.add("GET", "/metrics", handler)


def test_request_helpers() -> None:
    assert Request("POST", "/", body=b'{"a": [1]}').json() == {"a": [1]}
    assert Request("POST", "/", body="é".encode()).text() == "é"
    with pytest.raises(HttpError) as invalid:
        Request("POST", "/", body=b"").json()
    assert invalid.value.status == 400
    with pytest.raises(HttpError) as undecodable:
        Request("POST", "/", body=b"\xff").text()
    assert undecodable.value.status == 400


def test_request_target_forms() -> None:
    async def main() -> None:
        async with serving(make_router()) as server:
            _, _, body = await exchange(
                server,
                b"GET http://broker:8080/admin/v2/persistent/t/n/x/stats?q=1 HTTP/1.1\r\n\r\n",
            )
            assert json.loads(body)["path"] == "/admin/v2/persistent/t/n/x/stats"
            assert json.loads(body)["query"] == {"q": ["1"]}
            # A leading "//" is a path, not a host.
            status, _, body = await exchange(server, b"GET //admin/v2/x HTTP/1.1\r\n\r\n")
            assert (status, reason(body)) == (404, "no resource at //admin/v2/x")

    run(main())

"""The admin app's HTTP handling on aiohttp: routing, bodies, limits and error shapes."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from dedup_broker.errors import StorageError, TopicNotFoundError
from dedup_broker.http.bodies import (
    json_response,
    no_content,
    read_bool,
    read_int,
    read_json,
    read_text,
)
from dedup_broker.http.errors import BROKER_ERROR_STATUSES, HttpError
from dedup_broker.http.paths import query_flag, query_value
from dedup_broker.http.serving import MAX_BODY_BYTES, new_app, start_http
from harness.admin_http import http_request

pytestmark = pytest.mark.timeout(30)

Client = TestClient[web.Request, web.Application]


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 20))


@asynccontextmanager
async def serving(routes: list[web.RouteDef]) -> AsyncIterator[Client]:
    async with TestClient(TestServer(new_app(routes, BROKER_ERROR_STATUSES))) as client:
        yield client


def reason(body: bytes) -> str:
    parsed = json.loads(body)
    assert list(parsed) == ["reason"]
    return str(parsed["reason"])


async def echo(request: web.Request) -> web.Response:
    return json_response(
        {
            "method": request.method,
            "params": dict(request.match_info),
            "a": query_value(request, "a"),
            "force": query_flag(request, "force"),
        }
    )


TOPIC_PATTERN = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"


def test_json_response_is_utf8_json_with_the_given_status() -> None:
    async def hello(request: web.Request) -> web.Response:
        return json_response({"hello": "wörld"}, HTTPStatus.CREATED)

    async def main() -> None:
        async with serving([web.get("/hello", hello)]) as client:
            response = await client.get("/hello")
            assert response.status == 201
            assert response.headers["Content-Type"] == "application/json; charset=utf-8"
            assert await response.read() == '{"hello": "wörld"}'.encode()

    run(main())


def test_path_params_are_decoded_and_the_last_query_value_wins() -> None:
    async def main() -> None:
        async with serving([web.get(TOPIC_PATTERN + "/stats", echo)]) as client:
            response = await client.get(
                "/admin/v2/persistent/acme/ns/my%20topic%2Fx/stats?a=1&a=2&force=yes"
            )
            assert response.status == 200
            assert await response.json() == {
                "method": "GET",
                "params": {"tenant": "acme", "namespace": "ns", "topic": "my topic/x"},
                "a": "2",
                "force": True,
            }
            response = await client.get("/admin/v2/persistent/acme/ns/t/stats?force=no")
            assert (await response.json())["force"] is False

    run(main())


def test_the_most_specific_route_wins_whatever_the_registration_order() -> None:
    async def general(request: web.Request) -> web.Response:
        return web.Response(text="general")

    async def specific(request: web.Request) -> web.Response:
        return web.Response(text="specific")

    async def main() -> None:
        routes = [web.get("/a/{x}/{y}", general), web.get("/a/{x}/b", specific)]
        for order in (routes, routes[::-1]):
            async with serving(order) as client:
                assert await (await client.get("/a/1/b")).text() == "specific"
                assert await (await client.get("/a/1/c")).text() == "general"

    run(main())


def test_a_trailing_slash_is_ignored() -> None:
    async def main() -> None:
        async with serving([web.get(TOPIC_PATTERN + "/stats", echo)]) as client:
            response = await client.get("/admin/v2/persistent/t/n/x/stats/")
            assert response.status == 200
            assert (await response.json())["params"]["topic"] == "x"

    run(main())


def test_unknown_paths_and_methods_answer_in_pulsar_shape() -> None:
    async def main() -> None:
        routes = [web.get(TOPIC_PATTERN + "/partitions", echo)]
        routes.append(web.put(TOPIC_PATTERN + "/partitions", echo))
        async with serving(routes) as client:
            response = await client.get("/admin/v3/nothing")
            assert response.status == 404
            assert response.headers["Content-Type"].startswith("application/json")
            assert reason(await response.read()) == "no resource at /admin/v3/nothing"
            response = await client.delete("/admin/v2/persistent/t/n/x/partitions")
            assert response.status == 405
            assert reason(await response.read()) == "method DELETE not allowed"
            assert {"GET", "PUT"} <= set(response.headers["Allow"].split(","))
            # A path parameter never matches an empty segment.
            response = await client.get("/admin/v2/persistent/t//x/partitions")
            assert response.status == 404

    run(main())


def test_bodies_are_parsed_or_refused_with_a_400_saying_why() -> None:
    async def parsed(request: web.Request) -> web.Response:
        kind = request.match_info["kind"]
        value: object
        if kind == "json":
            value = await read_json(request)
        elif kind == "bool":
            value = await read_bool(request)
        elif kind == "int":
            value = await read_int(request, "a number of partitions")
        else:
            value = await read_text(request)
        return json_response({"value": value})

    async def main() -> None:
        async with serving([web.post("/parse/{kind}", parsed)]) as client:

            async def post(kind: str, body: bytes) -> tuple[int, bytes]:
                response = await client.post(f"/parse/{kind}", data=body)
                return response.status, await response.read()

            payload = json.dumps({"partitions": 4, "name": "ünï"}).encode()
            assert await post("json", payload) == (
                200,
                json.dumps(
                    {"value": {"partitions": 4, "name": "ünï"}}, ensure_ascii=False
                ).encode(),
            )
            assert await post("bool", b" TRUE\n") == (200, b'{"value": true}')
            assert await post("bool", b"false") == (200, b'{"value": false}')
            assert await post("int", b" 12 ") == (200, b'{"value": 12}')
            assert await post("text", "é".encode()) == (200, '{"value": "é"}'.encode())

            status, body = await post("json", b"{oops")
            assert status == 400
            assert reason(body).startswith("request body is not valid JSON")
            status, body = await post("json", b"")
            assert status == 400
            status, body = await post("bool", b"maybe")
            assert (status, reason(body)) == (
                400,
                "expected true or false as the body, got 'maybe'",
            )
            status, body = await post("int", b"four")
            assert (status, reason(body)) == (
                400,
                "expected a number of partitions as the body, got 'four'",
            )
            status, body = await post("text", b"\xff")
            assert status == 400
            assert reason(body).startswith("request body is not valid UTF-8")

    run(main())


def test_bodies_larger_than_the_limit_get_413() -> None:
    async def size(request: web.Request) -> web.Response:
        return json_response(len(await request.read()))

    async def main() -> None:
        async with serving([web.post("/body", size)]) as client:
            response = await client.post("/body", data=b"x" * MAX_BODY_BYTES)
            assert (response.status, await response.read()) == (200, str(MAX_BODY_BYTES).encode())
            response = await client.post("/body", data=b"x" * (MAX_BODY_BYTES + 1))
            assert response.status == 413
            assert f"{MAX_BODY_BYTES}" in reason(await response.read())

    run(main())


def test_failures_become_statuses_and_the_server_keeps_serving(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("ledger store unavailable")

    async def refused(request: web.Request) -> web.Response:
        raise HttpError(HTTPStatus.CONFLICT, "Partitioned topic already exists")

    async def missing(request: web.Request) -> web.Response:
        raise TopicNotFoundError("topic persistent://t/n/x does not exist")

    async def outage(request: web.Request) -> web.Response:
        raise StorageError("Kafka did not answer")

    async def empty(request: web.Request) -> web.Response:
        return no_content()

    routes = [
        web.get("/broken", broken),
        web.get("/refused", refused),
        web.get("/missing", missing),
        web.get("/outage", outage),
        web.delete("/empty", empty),
    ]

    async def main() -> None:
        async with serving(routes) as client:
            for path, status, text in [
                ("/broken", 500, "ledger store unavailable"),
                ("/refused", 409, "Partitioned topic already exists"),
                ("/missing", 404, "topic persistent://t/n/x does not exist"),
                ("/outage", 503, "Kafka did not answer"),
            ]:
                response = await client.get(path)
                assert (response.status, reason(await response.read())) == (status, text)
            response = await client.delete("/empty")
            assert (response.status, await response.read()) == (204, b"")

    with caplog.at_level(logging.ERROR, logger="dedup_broker.http.errors"):
        run(main())
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in failures] == ["admin handler for GET /broken failed"]
    assert failures[0].exc_info is not None


def test_start_http_on_port_zero_serves_until_stopped() -> None:
    async def main() -> None:
        endpoint = await start_http(
            new_app([web.get(TOPIC_PATTERN + "/stats", echo)], BROKER_ERROR_STATUSES),
            "127.0.0.1",
            0,
        )
        assert endpoint.port > 0
        url = f"http://127.0.0.1:{endpoint.port}/admin/v2/persistent/t/n/a%2Fb/stats"
        status, body = await asyncio.to_thread(http_request, "GET", url)
        assert (status, json.loads(body)["params"]["topic"]) == (200, "a/b")
        await endpoint.stop()
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", endpoint.port)

    run(main())


def test_stop_lets_an_in_flight_request_finish() -> None:
    started = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        started.set()
        await asyncio.sleep(0.2)
        return web.Response(text="done")

    async def main() -> None:
        endpoint = await start_http(
            new_app([web.get("/slow", slow)], BROKER_ERROR_STATUSES), "127.0.0.1", 0
        )
        url = f"http://127.0.0.1:{endpoint.port}/slow"
        request = asyncio.create_task(asyncio.to_thread(http_request, "GET", url))
        await started.wait()
        await endpoint.stop()
        assert await request == (200, b"done")

    run(main())

"""Bodies of the admin API: requests' text, JSON, booleans and numbers (or a 400 saying
why), and the JSON or empty bodies of answers."""

from __future__ import annotations

import json
from functools import partial
from http import HTTPStatus
from typing import Any

from aiohttp import web

from dedup_broker.http.errors import HttpError
from dedup_broker.json_values import whole_number

__all__ = [
    "json_response",
    "no_content",
    "read_bool",
    "read_int",
    "read_json",
    "read_partitions",
    "read_text",
]


async def read_text(request: web.Request) -> str:
    """The body as UTF-8 text (its size bounded by the app's ``client_max_size``)."""
    body = await request.read()
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"request body is not valid UTF-8: {exc}") from None


async def read_json(request: web.Request) -> Any:
    body = await request.read()
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"request body is not valid JSON: {exc}") from None


async def read_bool(request: web.Request) -> bool:
    """``true`` or ``false`` (Pulsar's admin client sends policies' flags that way)."""
    text = (await read_text(request)).strip().lower()
    if text not in ("true", "false"):
        raise HttpError(HTTPStatus.BAD_REQUEST, f"expected true or false as the body, got {text!r}")
    return text == "true"


def _whole_body(text: str) -> int | None:
    try:
        return whole_number(json.loads(text))
    except json.JSONDecodeError:
        pass
    try:
        return int(text)
    except ValueError:
        return None


async def read_int(request: web.Request, what: str) -> int:
    """A whole number (bare or as a JSON string); ``what`` names it in the 400 (``"a
    number of partitions"``)."""
    text = (await read_text(request)).strip()
    number = _whole_body(text)
    if number is None:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"expected {what} as the body, got {text!r}")
    return number


async def read_partitions(request: web.Request) -> int:
    """A number of partitions: a bare number (Pulsar's admin clients up to 2.x, curl), the
    same as a JSON string (``"3"``, which Pulsar takes too) or Pulsar's
    ``PartitionedTopicMetadata`` (``{"partitions": N, "properties": null}``, the Go and Java
    admin clients)."""
    text = (await read_text(request)).strip()
    if text.startswith("{"):
        try:
            value = json.loads(text).get("partitions")
        except (json.JSONDecodeError, AttributeError):
            value = None
        number = whole_number(value)
        if number is not None:
            return number
        raise HttpError(HTTPStatus.BAD_REQUEST, f'expected {{"partitions": N}}, got {text!r}')
    number = _whole_body(text)
    if number is None:
        raise HttpError(
            HTTPStatus.BAD_REQUEST, f"expected a number of partitions as the body, got {text!r}"
        )
    return number


_dumps = partial(json.dumps, ensure_ascii=False)


def json_response(obj: Any, status: HTTPStatus = HTTPStatus.OK) -> web.Response:
    """``obj`` as a JSON body (non-ASCII text kept as UTF-8, not escaped)."""
    return web.json_response(obj, status=int(status), dumps=_dumps)


def no_content() -> web.Response:
    return web.Response(status=HTTPStatus.NO_CONTENT)

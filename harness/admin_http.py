"""A small client for the broker's admin REST API (tests, demo, tools)."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request


def http_request(
    method: str, url: str, body: bytes | None = None, context: ssl.SSLContext | None = None
) -> tuple[int, bytes]:
    """``(status, body)``; HTTP error statuses are returned, not raised. ``context``: how
    an ``https://`` URL's server is verified."""
    request = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()

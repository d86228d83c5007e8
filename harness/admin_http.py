"""A small client for the broker's admin REST API (tests, demo, tools)."""

from __future__ import annotations

import json
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


def create_namespace(
    http_url: str, namespace: str, cluster: str, context: ssl.SSLContext | None = None
) -> None:
    """Create ``tenant/namespace`` through the admin API, as a user would before using
    it: the tenant (allowed on ``cluster``) unless it exists, then the namespace. Raises
    ``RuntimeError`` with the broker's answer when either is refused."""
    tenant = namespace.split("/")[0]
    body = json.dumps({"adminRoles": [], "allowedClusters": [cluster]}).encode()
    for path, payload in ((f"tenants/{tenant}", body), (f"namespaces/{namespace}", None)):
        status, answer = http_request("PUT", f"{http_url}/admin/v2/{path}", payload, context)
        if status not in (204, 409):  # 409: it exists already
            raise RuntimeError(f"PUT /admin/v2/{path}: {status} {answer.decode(errors='replace')}")

"""Unit tests may be coroutines: each runs on a fresh event loop, bounded in time."""

from __future__ import annotations

import asyncio
import inspect

import pytest

ASYNC_TEST_TIMEOUT_SECONDS = 10.0


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    function = pyfuncitem.obj
    if not inspect.iscoroutinefunction(function):
        return None
    names = inspect.signature(function).parameters
    arguments = {name: pyfuncitem.funcargs[name] for name in names}
    asyncio.run(asyncio.wait_for(function(**arguments), ASYNC_TEST_TIMEOUT_SECONDS))
    return True

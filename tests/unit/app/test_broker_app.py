"""The composition root's start-up heap: frozen once the broker serves."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from dedup_broker.app.broker_app import freeze_startup_heap


@pytest.fixture
def thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("thawed")
def test_a_full_collection_walks_only_what_came_after_start_up() -> None:
    built = [[index] for index in range(50_000)]  # what start-up made, kept
    freeze_startup_heap()
    assert gc.get_freeze_count() >= len(built)
    served = [index for index in range(100)]  # what serving makes afterwards
    walked = gc.get_objects()
    assert len(walked) < len(built)
    assert any(item is served for item in walked)
    assert not any(item is built for item in walked)

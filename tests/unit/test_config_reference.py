"""docs/configuration.md is what ``BrokerConfig`` says today and lists every setting under
the name ``dedup-broker config`` prints."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from dedup_broker.app.cli import main
from dedup_broker.app.config_reference import (
    MEANINGS,
    PAGE,
    docstrings_and_sections,
    reference,
    settings,
)
from dedup_broker.config import ENV_PREFIX, BrokerConfig


def test_the_configuration_page_is_up_to_date() -> None:
    assert PAGE.read_text() == reference(), (
        "docs/configuration.md is stale: run `python -m dedup_broker.app.config_reference`"
    )


def test_every_printed_setting_is_on_the_page(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in list(os.environ):
        if key.startswith(ENV_PREFIX):
            monkeypatch.delenv(key)
    assert main(["config"]) == 0
    printed = json.loads(capsys.readouterr().out)
    page = PAGE.read_text()
    assert [name for name in printed if f"| `{name}` |" not in page] == []
    assert sorted(printed) == sorted(setting.name for setting in settings())


def test_every_setting_has_a_meaning() -> None:
    assert [s.name for s in settings() if not s.meaning] == []


def test_meanings_name_only_settings_without_a_docstring() -> None:
    fields = {f.name for f in dataclasses.fields(BrokerConfig)}
    docs, _ = docstrings_and_sections()
    assert set(MEANINGS) <= fields
    assert set(MEANINGS) & set(docs) == set()

"""docs/metrics.md is what the registries say today, and the dashboard and the rules
read only families it lists (tests/integration check both against a running broker)."""

from __future__ import annotations

import re

from dedup_broker.app.metrics_reference import PAGE, broker_registry, reference
from dedup_broker.metrics_registry import families_of, new_registry
from system_topics.worker_metrics import WorkerMetrics
from tests.metric_names import RULES, dashboard_expressions, names_in, unknown_names


def documented() -> dict[str, str]:
    worker = new_registry()
    WorkerMetrics(worker)
    families = [*families_of(broker_registry()), *families_of(worker)]
    return {f.name: f.kind for f in families}


def test_the_metrics_page_is_up_to_date() -> None:
    assert PAGE.read_text() == reference(), (
        "docs/metrics.md is stale: run `python -m dedup_broker.app.metrics_reference`"
    )


def test_every_registered_family_is_on_the_page() -> None:
    page = PAGE.read_text()
    missing = [name for name in documented() if f"| `{name}` |" not in page]
    assert missing == []


def test_the_dashboard_reads_only_documented_families() -> None:
    families = documented()
    for expression in dashboard_expressions():
        assert names_in(expression), expression
        assert unknown_names(expression, families) == set(), expression


def test_the_rules_read_only_documented_families() -> None:
    lines = [line for line in RULES.read_text().splitlines() if not line.lstrip().startswith("#")]
    recorded = re.compile(r"\w+:\w+:\w+")  # the names recording rules give their series
    assert unknown_names(recorded.sub("", "\n".join(lines)), documented()) == set()

"""librdkafka's own log lines, routed through Python logging and kept from flooding it.

With Kafka unreachable, every client logs a failed connection attempt many times a
second. The lines go to the ``dedup_broker.kafka`` logger (so they obey the process's
log configuration) and a repeat of a line already seen within ``REPEAT_WINDOW_SECONDS``
is counted instead of printed. Every error line, held back or not, is counted by its
librdkafka facility for ``dedup_broker_kafka_client_errors_total`` (one tally per
process: all Kafka clients of a process log here).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric

LOGGER_NAME = "dedup_broker.kafka"
REPEAT_WINDOW_SECONDS = 30.0
_NUMBERS = re.compile(r"\d+")


class RepeatedLineFilter(logging.Filter):
    """Lets a line through once per window; says how many repeats it held back."""

    def __init__(self, window_seconds: float = REPEAT_WINDOW_SECONDS) -> None:
        super().__init__()
        self.window_seconds = window_seconds
        self._seen: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            _count_error(record)
        shape = _NUMBERS.sub("#", record.getMessage())
        now = time.monotonic()
        first, held = self._seen.get(shape, (0.0, -1))
        if held >= 0 and now - first < self.window_seconds:
            self._seen[shape] = (first, held + 1)
            return False
        if held > 0:
            record.msg = f"{record.getMessage()} ({held} similar line(s) held back)"
            record.args = ()
        if len(self._seen) > 1000:
            self._seen.clear()
        self._seen[shape] = (now, 0)
        return True


def kafka_logger() -> logging.Logger:
    """The logger to pass as ``logger`` in every confluent-kafka client configuration."""
    logger = logging.getLogger(LOGGER_NAME)
    if not any(isinstance(f, RepeatedLineFilter) for f in logger.filters):
        logger.addFilter(RepeatedLineFilter())
    return logger


_errors: dict[str, int] = {}
_errors_lock = threading.Lock()


def _count_error(record: logging.LogRecord) -> None:
    """confluent-kafka logs ``"%s [%s] %s"`` with librdkafka's facility first."""
    args = record.args
    facility = str(args[0]) if isinstance(args, tuple) and args else "other"
    with _errors_lock:
        _errors[facility] = _errors.get(facility, 0) + 1


class KafkaClientErrors:
    """``dedup_broker_kafka_client_errors_total{facility}``: error lines of the process's
    Kafka clients (FAIL: a broker connection failed, REQTMOUT: a request timed out, ...)."""

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(
            "dedup_broker_kafka_client_errors_total",
            "Errors the Kafka clients reported (librdkafka error log lines), by facility",
            labels=["facility"],
        )

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        with _errors_lock:
            counts = sorted(_errors.items())
        for facility, count in counts:
            family.add_metric([facility], count)
        yield family

"""JSON values read as Pulsar's admin API reads them: its JSON reader takes a number given
as a string (``"3"``) wherever a number is expected, so clients that quote numbers work."""

from __future__ import annotations

import re

__all__ = ["decimal_number", "whole_number"]

_WHOLE = re.compile(r"\s*[+-]?[0-9]+\s*")


def whole_number(value: object) -> int | None:
    """``3`` or ``"3"`` as 3; ``None`` for anything else (``true``, ``3.5``, ``"three"``)."""
    if isinstance(value, str) and _WHOLE.fullmatch(value):
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def decimal_number(value: object) -> float | None:
    """``0.5``, ``1`` or ``"0.5"`` as a float; ``None`` for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None

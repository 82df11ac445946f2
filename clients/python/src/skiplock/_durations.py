"""Durations as the coordination APIs take them: seconds (int or float) or
a timedelta, checked before anything is sent."""

from __future__ import annotations

import datetime as dt
from typing import Any, Union

Seconds = Union[int, float, dt.timedelta]


def seconds(value: Any, name: str, low: float, high: float, positive: bool = False) -> float:
    """Seconds within [low, high] (and above 0 when `positive`): else
    ValueError, or TypeError for something that is not a duration."""
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be seconds (int or float) or a timedelta, "
                        f"not {type(value).__name__}")
    if not low <= value <= high or (positive and value <= 0):
        raise ValueError(f"{name} must be {'positive, ' if positive else ''}{low:g} to "
                         f"{high:g} seconds, got {value!r}")
    return float(value)

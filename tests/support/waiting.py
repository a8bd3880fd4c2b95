"""Bounded waits for what background threads and processes do: tests poll, never sleep blindly."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], timeout: float = 5.0, what: str = "condition") -> None:
    """Return once `condition()` is true; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def stays(condition: Callable[[], bool], seconds: float) -> bool:
    """True if `condition` holds throughout the next `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not condition():
            return False
        time.sleep(0.01)
    return condition()

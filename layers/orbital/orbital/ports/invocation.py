"""What the running Lambda invocation has left, for work done inside a request that must end before the invocation
is cut off (the function's timeout, API Gateway's 29 s): a Lambda entry point wraps its call in `running(context)`,
and the work asks `remaining_seconds()`. None outside such an invocation (the local gateway, a test calling a
handler directly): the caller picks its own bound then."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_remaining: ContextVar[Callable[[], int] | None] = ContextVar("orbital_invocation_remaining", default=None)


@contextmanager
def running(context: Any) -> Iterator[None]:
    """While this Lambda invocation (its `context`) runs: `remaining_seconds` reads its remaining time."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    token = _remaining.set(remaining if callable(remaining) else None)
    try:
        yield
    finally:
        _remaining.reset(token)


def remaining_seconds() -> float | None:
    """The seconds the current invocation has left; None when that is not known."""
    remaining = _remaining.get()
    if remaining is None:
        return None
    try:
        return max(0.0, float(remaining()) / 1000)
    except Exception:  # a context that cannot say: as if unknown
        return None

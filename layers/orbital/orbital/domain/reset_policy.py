"""Session reset policies (spec §5.10): `{mode: "manual" | "daily" | "idle", atHour?, idleMinutes?}`.

* manual (or no policy): never resets by itself.
* daily: resets when the last activity (`updatedAt`) is before the most recent `atHour`:00 boundary (UTC; default
  04:00).
* idle: resets when more than `idleMinutes` (default 60) have passed since the last activity.

A policy is evaluated when a run starts, against `updatedAt` before the new message is recorded.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

DEFAULT_AT_HOUR = 4
DEFAULT_IDLE_MINUTES = 60
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
MINUTE_MS = 60_000


def _number(value: Any, default: float) -> float:
    """Policies are stored unvalidated: accept numbers and numeric strings, fall back to the default otherwise."""
    if value is None or isinstance(value, bool):
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default


def daily_reset_time(now_ms: int, at_hour: Any = DEFAULT_AT_HOUR) -> int:
    """The most recent daily boundary at or before `now_ms`: today at `at_hour`:00:00.000 UTC, or yesterday's
    when today's is still ahead."""
    hour = math.trunc(_number(at_hour, DEFAULT_AT_HOUR))
    boundary = now_ms - now_ms % DAY_MS + hour * HOUR_MS
    if boundary > now_ms:
        boundary -= DAY_MS
    return boundary


def should_auto_reset(policy: Mapping[str, Any] | None, updated_at: int, now_ms: int) -> bool:
    """Whether a session last active at `updated_at` is due for an automatic reset at `now_ms`."""
    if not isinstance(policy, Mapping):
        return False
    mode = policy.get("mode")
    if mode == "daily":
        return updated_at < daily_reset_time(now_ms, policy.get("atHour"))
    if mode == "idle":
        idle_ms = _number(policy.get("idleMinutes"), DEFAULT_IDLE_MINUTES) * MINUTE_MS
        return now_ms - updated_at > idle_ms
    return False


def initial_policy(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The policy a session without one adopts: a copy of `session.defaultResetPolicy` when it has a mode."""
    section = config.get("session")
    default = section.get("defaultResetPolicy") if isinstance(section, Mapping) else None
    if isinstance(default, Mapping) and default.get("mode"):
        return copy.deepcopy(dict(default))
    return None


def merge_policy(existing: Mapping[str, Any] | None, patch: Mapping[str, Any] | None) -> dict[str, Any]:
    """`session.patch` semantics: the patch is merged over the current policy; a missing mode becomes manual."""
    merged: dict[str, Any] = dict(existing) if isinstance(existing, Mapping) else {}
    if isinstance(patch, Mapping):
        merged.update(copy.deepcopy(dict(patch)))
    if not merged.get("mode"):
        merged["mode"] = "manual"
    return merged

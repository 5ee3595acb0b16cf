"""What the parts of the local moto stack share: the account and region it serves, and the lock each serialized moto
service holds around its operations (`stack.make_moto_atomic`; persistence and the TTL sweep read items under it)."""

from __future__ import annotations

import threading

ACCOUNT = "123456789012"
REGION = "us-east-1"

MOTO_LOCKS: dict[str, threading.RLock] = {"dynamodb": threading.RLock(), "stepfunctions": threading.RLock()}
"""The lock each serialized moto service holds around its operations (persistence reads items under it too)."""

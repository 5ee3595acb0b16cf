"""Methods of the `sessions` family."""

from __future__ import annotations

from orbital.protocol.registry import Router

router = Router("sessions")

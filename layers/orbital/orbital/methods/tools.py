"""Methods of the `tools` family."""

from __future__ import annotations

from orbital.protocol.registry import Router

router = Router("tools")

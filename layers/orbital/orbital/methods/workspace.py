"""Methods of the `workspace` family."""

from __future__ import annotations

from orbital.protocol.registry import Router

router = Router("workspace")

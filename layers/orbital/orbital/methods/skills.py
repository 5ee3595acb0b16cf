"""Methods of the `skills` family."""

from __future__ import annotations

from orbital.protocol.registry import Router

router = Router("skills")

"""Methods of the `channels` family."""

from __future__ import annotations

from orbital.protocol.registry import Router

router = Router("channels")

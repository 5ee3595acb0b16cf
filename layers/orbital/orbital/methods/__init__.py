"""Every RPC method family, and the translators of other gateways' dialects, included explicitly into the one
registry."""

from __future__ import annotations

import functools

from orbital.protocol.registry import Registry


@functools.cache
def registry() -> Registry:
    # lazy: the families are imported when the registry is first assembled, not by every entry point's import
    from orbital.dialects import exoclaw, windie, xeno
    from orbital.methods import (
        approvals,
        backup,
        channels,
        chat,
        config,
        connect,
        cron,
        devices,
        heartbeat,
        installs,
        mcp,
        mcp_auth,
        nodes,
        pairing,
        sessions,
        skills,
        spend,
        tools,
        transfer,
        workspace,
    )

    reg = Registry()
    for module in (
        connect,
        tools,
        nodes,
        config,
        sessions,
        chat,
        approvals,
        workspace,
        channels,
        pairing,
        heartbeat,
        cron,
        transfer,
        skills,
        spend,
        mcp,
        installs,
        devices,
        mcp_auth,
        backup,
        xeno,
        exoclaw,
        windie,
    ):
        reg.include(module.router)
    return reg

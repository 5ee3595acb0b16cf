"""Load every method family once, so the hooks they register (disconnect, timeouts, node connect) are in place
whichever entry point runs first."""

from __future__ import annotations


def load() -> None:
    from orbital.methods import registry

    registry()

"""Steps of the `agent_turn` state machine, run by the `agent_steps` function (`{"step": name, ...}` in, the next
state out): the agent's own steps (`orbital.agent.turn.STEPS`), given this container's Services."""

from __future__ import annotations

from typing import Any

from orbital.agent import turn
from orbital.runtime.services import get_services


def handle(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    step = event.get("step")
    func = turn.STEPS.get(step) if isinstance(step, str) else None
    if func is None:
        raise ValueError(f"unknown agent step: {step!r}")
    return func(get_services(), event)

"""Lambda entry point for the steps of the agent_turn state machine (`{"step": ...}` payloads)."""

from orbital.observability import logger, traced
from orbital.runtime.agent_steps import handle


@logger.inject_lambda_context(clear_state=True)
@traced
def lambda_handler(event: dict, context: object) -> dict:
    return handle(event, context)

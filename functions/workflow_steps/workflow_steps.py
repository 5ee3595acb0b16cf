"""Lambda entry point for the Step Functions task steps (`{"step": ...}` payloads)."""

from orbital.observability import logger, traced
from orbital.runtime.workflows import handle_step


@logger.inject_lambda_context(clear_state=True)
@traced
def lambda_handler(event: dict, context: object) -> dict:
    return handle_step(event, context)

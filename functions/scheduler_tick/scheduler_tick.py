"""Lambda entry point for the scheduler tick (an EventBridge schedule, every minute): due cron jobs and heartbeats."""

from orbital.observability import logger, traced
from orbital.runtime.scheduler import handle_tick


@logger.inject_lambda_context(clear_state=True)
@traced
def lambda_handler(event: dict, context: object) -> dict:
    return handle_tick(event, context)

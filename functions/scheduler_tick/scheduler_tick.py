"""Lambda entry point for the scheduler tick (an EventBridge schedule, every minute): due cron jobs and heartbeats."""

from orbital.observability import logger, tracer
from orbital.runtime.scheduler import handle_tick


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict, context: object) -> dict:
    return handle_tick(event, context)

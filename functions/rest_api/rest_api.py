"""Lambda entry point for the HTTP API (FastAPI through Mangum)."""

from orbital.observability import logger, metrics, traced
from orbital.rest.app import lambda_adapter


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@traced
def lambda_handler(event: dict, context: object) -> dict:
    return lambda_adapter()(event, context)

"""Lambda entry point for the HTTP API: the FastAPI app through Mangum (orbital.rest.app)."""

from orbital.observability import logger, metrics, traced
from orbital.rest.app import lambda_handler as serve


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@traced
def lambda_handler(event: dict, context: object) -> dict:
    return serve()(event, context)

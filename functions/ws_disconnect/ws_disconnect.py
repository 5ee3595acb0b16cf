"""Lambda entry point for the WebSocket route(s) served by `ws_disconnect`."""

from orbital.observability import logger, metrics, traced
from orbital.runtime.gateway import handle_disconnect


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@traced
def lambda_handler(event: dict, context: object) -> dict:
    return handle_disconnect(event, context)

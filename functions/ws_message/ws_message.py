"""Lambda entry point for the WebSocket route(s) served by `ws_message`."""

from orbital.observability import logger, metrics, traced
from orbital.ports import invocation
from orbital.runtime.gateway import handle_message


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@traced
def lambda_handler(event: dict, context: object) -> dict:
    with invocation.running(context):  # what a frame's work may take (a WindieOS compact-history)
        return handle_message(event, context)

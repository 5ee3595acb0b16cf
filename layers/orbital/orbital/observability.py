"""The shared Powertools logger and metrics, and the entry points' tracing (configured by POWERTOOLS_* variables in
template Globals).

Tracing is built lazily: importing the X-Ray SDK costs about 0.3 s, more than everything else an entry point
imports. `traced` wraps a handler so that the Powertools Tracer (and with it the SDK) is built on the first
invocation of a container where tracing is on (on Lambda, POWERTOOLS_TRACE_DISABLED not set), and never where it
is off (`orbital dev`, tests, a stack deployed with `TracingMode=PassThrough`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger, Metrics

logger = Logger(service="orbital")
metrics = Metrics(namespace="Orbital", service="orbital")

Handler = Callable[[Any, Any], Any]

_tracer: Any = None
_tracer_lock = threading.Lock()


def tracer() -> Any:
    """The Powertools Tracer of this container, built on first use (this imports the X-Ray SDK)."""
    global _tracer
    with _tracer_lock:
        if _tracer is None:
            from aws_lambda_powertools import Tracer

            _tracer = Tracer(service="orbital")
        return _tracer


def tracing_enabled() -> bool:
    """What Powertools decides from the environment (on Lambda and not disabled), without importing X-Ray."""
    from aws_lambda_powertools.tracing.tracer import Tracer

    return not Tracer._is_tracer_disabled()


def traced(handler: Handler) -> Handler:
    """`Tracer.capture_lambda_handler(capture_response=False)`, decided and built on the first invocation."""
    chosen: list[Handler] = []

    @functools.wraps(handler)
    def run(event: Any, context: Any) -> Any:
        if not chosen:
            wrapped = tracer().capture_lambda_handler(capture_response=False)(handler) if tracing_enabled() else handler
            chosen.append(wrapped)
        return chosen[0](event, context)

    return run


def count(name: str, value: float = 1) -> None:
    """Add a count metric unless metrics are disabled (the local gateway disables them: nothing would read them,
    and Powertools keeps disabled metrics in memory until a flush)."""
    import os

    if os.environ.get("POWERTOOLS_METRICS_DISABLED", "").lower() in {"1", "true", "yes"}:
        return
    from aws_lambda_powertools.metrics import MetricUnit

    metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)

"""The shared Powertools logger, tracer and metrics (configured by POWERTOOLS_* variables in template Globals)."""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer

logger = Logger(service="orbital")
tracer = Tracer(service="orbital")
metrics = Metrics(namespace="Orbital", service="orbital")


def count(name: str, value: float = 1) -> None:
    """Add a count metric unless metrics are disabled (the local gateway disables them: nothing would read them,
    and Powertools keeps disabled metrics in memory until a flush)."""
    import os

    if os.environ.get("POWERTOOLS_METRICS_DISABLED", "").lower() in {"1", "true", "yes"}:
        return
    from aws_lambda_powertools.metrics import MetricUnit

    metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)

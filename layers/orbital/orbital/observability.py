"""The shared Powertools logger, tracer and metrics (configured by POWERTOOLS_* variables in template Globals)."""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer

logger = Logger(service="orbital")
tracer = Tracer(service="orbital")
metrics = Metrics(namespace="Orbital", service="orbital")

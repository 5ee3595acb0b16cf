"""Tracing is decided on the first invocation: X-Ray is never imported where tracing is off, and is on Lambda."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
import functions.workflow_steps.workflow_steps as entry
from orbital.observability import traced
imported_at_load = "aws_xray_sdk.core" in sys.modules

@traced
def handler(event, context):
    return {"echo": event}

out = handler({"n": 1}, None)
print(json.dumps({"atLoad": imported_at_load, "afterCall": "aws_xray_sdk.core" in sys.modules, "out": out,
                  "wrapped": handler.__wrapped__.__name__}))
"""


def _run(env: dict[str, str]) -> dict[str, object]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LAMBDA_", "POWERTOOLS_TRACE", "AWS_SAM"))}
    base["PYTHONPATH"] = os.pathsep.join([str(ROOT / "layers" / "orbital"), str(ROOT)])
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env={**base, **env}, capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_outside_lambda_x_ray_is_never_imported() -> None:
    seen = _run({})
    assert seen == {"atLoad": False, "afterCall": False, "out": {"echo": {"n": 1}}, "wrapped": "handler"}


def test_on_lambda_with_tracing_disabled_x_ray_is_never_imported() -> None:
    seen = _run({"LAMBDA_TASK_ROOT": "/var/task", "POWERTOOLS_TRACE_DISABLED": "true"})
    assert (seen["atLoad"], seen["afterCall"]) == (False, False)


def test_on_lambda_with_tracing_on_the_tracer_is_built_at_the_first_call() -> None:
    seen = _run({"LAMBDA_TASK_ROOT": "/var/task", "AWS_XRAY_CONTEXT_MISSING": "IGNORE_ERROR"})
    assert (seen["atLoad"], seen["afterCall"]) == (False, True)
    assert seen["out"] == {"echo": {"n": 1}}

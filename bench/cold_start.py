"""Cold import of every Lambda entry point, each in a fresh interpreter.

For each function under functions/, the time to import its handler module (measured inside the interpreter, so
interpreter start-up is left out), median / min / max over `--runs` fresh processes, interleaved so that machine
noise spreads evenly. Printed beside it, from the same run: a fresh interpreter's own start-up, the import of
`boto3` alone (what any function that calls AWS pays in any case), and for the HTTP function its import together
with its first request, which builds the app.

With `--no-bytecode` every module is compiled from source, as on Lambda when the deployment package carries no
`.pyc` files for the runtime's Python (the layer ships them for the modules on the entry points' import path; see
layers/orbital/Makefile).

    python bench/cold_start.py [--runs 7] [--no-bytecode]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MEASURE = "import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
FIRST_REQUEST = (
    "import json, time; t = time.perf_counter(); import functions.rest_api.rest_api; "
    "from orbital.rest.app import lambda_handler; "
    "event = json.loads(open('events/http-health.json').read()); "
    "assert lambda_handler()(event, None)['statusCode'] == 200; print(time.perf_counter() - t)"
)
"""The HTTP function builds its app at the first request (FastAPI, the registry, the admin API's routes): its
import and that first request (`GET /health`) together, in a fresh interpreter."""
REST_FIRST = "rest_api: import + first request"


def entry_points() -> list[str]:
    return sorted(
        f"functions.{d.name}.{d.name}" for d in (ROOT / "functions").iterdir() if (d / f"{d.name}.py").is_file()
    )


def _env(no_bytecode: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAMBDA_", "AWS_LAMBDA"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "layers" / "orbital"), str(ROOT)])
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if no_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _once(module: str, env: dict[str, str], extra: list[str]) -> float:
    code = FIRST_REQUEST if module == REST_FIRST else MEASURE.format(module=module)
    out = subprocess.run(
        [sys.executable, *extra, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return float(out.stdout.strip().splitlines()[-1])


def _startup(env: dict[str, str]) -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True, cwd=ROOT)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--no-bytecode", action="store_true", help="compile every module from source, every time")
    args = parser.parse_args()
    env = _env(args.no_bytecode)
    modules = [*entry_points(), REST_FIRST, "boto3"]
    with tempfile.TemporaryDirectory() as empty:
        # an empty, fresh bytecode cache per run: nothing compiled earlier is found
        extra = ["-X", f"pycache_prefix={empty}"] if args.no_bytecode else []
        if not args.no_bytecode:  # write the bytecode once, as an installed package has it
            for module in modules:
                _once(module, env, [])
        samples: dict[str, list[float]] = {m: [] for m in modules}
        startup: list[float] = []
        for _ in range(args.runs):
            startup.append(_startup(env))
            for module in modules:
                samples[module].append(_once(module, env, extra))
    mode = "compiled from source every time" if args.no_bytecode else "with bytecode"
    print(f"cold import, {args.runs} fresh interpreters each ({mode}), Python {sys.version.split()[0]}")
    print(f"  interpreter start-up (python -c pass): median {statistics.median(startup) * 1000:.0f} ms")
    width = max(len(m) for m in modules)
    for module in modules:
        s = sorted(samples[module])
        print(
            f"  {module:{width}}  median {statistics.median(s) * 1000:6.0f} ms"
            f"  (min {s[0] * 1000:.0f}, max {s[-1] * 1000:.0f})"
        )


if __name__ == "__main__":
    main()

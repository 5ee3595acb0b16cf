"""The local gateway's Step Functions process (`python -m orbital.local.sfn_child FD`, started by
`orbital.local.sfn_worker.StepFunctionsProcess`): moto's Step Functions backend, behind the hooks of
`orbital.local.step_functions`, answering the gateway over the socket pair it was given, until the gateway closes its
end."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

from orbital.local import step_functions
from orbital.local.sfn_worker import (
    INLINE_METHODS,
    AfterReply,
    WorkerChannel,
    held_starts,
    hold_execution_starts,
    start_held,
)


def _moto_error(exc: BaseException) -> tuple[str, str, int]:
    return step_functions.error_answer(exc)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the gateway's to handle: it ends this process by closing the socket
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s sfn %(name)s: %(message)s")
    conn = Connection(int(argv[0]))
    step_functions.skip_batch_models()
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.core.config import default_user_config
    from moto.stepfunctions.responses import StepFunctionResponse

    default_user_config["stepfunctions"]["execute_state_machine"] = True
    step_functions.untrack_models()
    step_functions.cache_state_machine_parsing()
    step_functions.serialize_operations()
    step_functions.ready_task_callbacks()
    run = step_functions.moto_action(
        StepFunctionResponse, step_functions.REGION, DEFAULT_ACCOUNT_ID, contextlib.nullcontext
    )
    pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="orbital-sfn")
    channel: WorkerChannel | None = None

    def invoke(name: str, payload: bytes | str | None) -> tuple[bytes, bool]:
        assert channel is not None
        data, failed = channel.request("invoke", (name, payload), timeout=None)
        return bytes(data), bool(failed)

    hold_execution_starts()

    def serve(kind: str, payload: Any) -> Any:
        if kind == "sfn":
            method, params = payload
            if method != "start_execution":
                return run(method, params) or {}
            with held_starts() as held:  # answered first, as AWS does: the new execution then runs on its own
                return AfterReply(run(method, params) or {}, functools.partial(start_held, held))
        if kind == "ready":
            step_functions.use_functions(set(payload), invoke)
            return True
        raise ValueError(f"unknown request {kind!r}")

    def dispatch(work: Callable[[], None]) -> None:
        pool.submit(work)

    def inline(kind: str, payload: Any) -> bool:
        return kind == "sfn" and payload[0] in INLINE_METHODS

    channel = WorkerChannel(conn, serve, dispatch, _moto_error, "orbital-sfn-worker", inline)
    channel.closed.wait()
    # the gateway is gone: executions still running have no one to answer them
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

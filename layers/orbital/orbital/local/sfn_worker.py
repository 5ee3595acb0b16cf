"""Step Functions of the local gateway in a worker process.

moto interprets the state machines (ADR 0006): a tool call's `deferred_call` execution, every agent turn, every
wait. In the gateway's own process that interpretation shares one GIL with the event loop and the request handlers,
so a tool call's reply waited for its own execution's bookkeeping (ADR 0017). Here moto's Step Functions backend
runs in a child process instead:

- the gateway's Step Functions calls (the Workflows port's local backend, `orbital.local.workflows`) are sent to the
  child over a socket pair and answered by moto's own handler there, behind the hooks of
  `orbital.local.step_functions`;
- the executions' Lambda tasks come back to the gateway, which runs the function's handler in process as before
  (`stack.run_function`): DynamoDB, S3 and the sockets stay in the gateway's process;
- the child exits when the gateway closes its end, or dies (the socket reads end of file); if the child dies
  first, the gateway starts another (`LocalStack`). The child's program is `orbital.local.sfn_child`.

Both sides use one `WorkerChannel`: requests either way, each answered in a thread, replies matched by id. The child
answers its quick Step Functions requests (`INLINE_METHODS`) on the thread that reads them, and a `StartExecution`
before the execution it creates starts running, as AWS answers once the execution is recorded: the gateway's
handler waiting for that answer holds up the next frame of its socket.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

log = logging.getLogger("orbital.local")

CALL_TIMEOUT = 120.0
"""Longest wait for the child's answer to one Step Functions call (each is a few milliseconds of moto's work)."""

LOOP_CALL_TIMEOUT = 5.0
"""The same for a call made on the gateway's event loop (a handler run there): every socket waits meanwhile."""

START_TIMEOUT = 60.0
"""Longest wait for the child to load moto and say it is ready."""


class WorkerGoneError(Exception):
    """The Step Functions process is not there (stopped, or died)."""


class WorkerRefusedError(Exception):
    """An error answer of the other side: the AWS error code, message and HTTP status."""

    def __init__(self, error_code: str, message: str, status: int) -> None:
        super().__init__(message)
        self.error_code, self.message, self.status = error_code, message, status


class _Slot:
    __slots__ = ("done", "ok", "value")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.ok = False
        self.value: Any = None


class AfterReply:
    """An answer of `serve` with work to do once it has been sent."""

    __slots__ = ("after", "value")

    def __init__(self, value: Any, after: Callable[[], None]) -> None:
        self.value, self.after = value, after


READER_JOIN_TIMEOUT = 5.0
"""How long `WorkerChannel.close` waits for its reading thread to finish the request it may be answering."""


class WorkerChannel:
    """Requests both ways over one connection. `serve(kind, payload)` answers the other side's requests (in the
    thread `run` gives it, or on the reading thread itself for the requests `inline` picks: those must never wait
    for the other side); its exceptions go back as `Refused` (code, message, status from `describe_error`). An
    `AfterReply` answer sends its value, then does its work."""

    def __init__(
        self,
        conn: Connection,
        serve: Callable[[str, Any], Any],
        run: Callable[[Callable[[], None]], None],
        describe_error: Callable[[BaseException], tuple[str, str, int]],
        name: str,
        inline: Callable[[str, Any], bool] | None = None,
    ) -> None:
        self._conn = conn
        self._serve = serve
        self._run = run
        self._inline = inline
        self._describe_error = describe_error
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, _Slot] = {}
        self._lock = threading.Lock()
        self.closed = threading.Event()
        self._reader = threading.Thread(target=self._read, name=name, daemon=True)
        self._reader.start()

    def request(self, kind: str, payload: Any, timeout: float | None = CALL_TIMEOUT) -> Any:
        slot = _Slot()
        rid = next(self._ids)
        with self._lock:
            if self.closed.is_set():
                raise WorkerGoneError("the Step Functions process is gone")
            self._waiting[rid] = slot
        try:
            self._send(("req", rid, kind, payload))
            if not slot.done.wait(timeout):
                raise TimeoutError(f"no answer to {kind} within {timeout} s")
        finally:
            with self._lock:
                self._waiting.pop(rid, None)
        if not slot.ok:
            if isinstance(slot.value, BaseException):
                raise slot.value
            raise WorkerRefusedError(*slot.value)
        return slot.value

    def close(self) -> None:
        """Close the connection. Its socket is shut down first, so the reading thread sees its end, and the
        descriptor is closed once that thread is done with it: closed under a thread about to read, its number could
        go to the next descriptor opened, which that thread would then read from."""
        with contextlib.suppress(OSError, ValueError):  # closed already, or not a socket
            copy = os.dup(self._conn.fileno())
            try:
                end = socket.socket(fileno=copy)
            except OSError:
                os.close(copy)
                raise
            with end:
                end.shutdown(socket.SHUT_RDWR)
        if threading.current_thread() is not self._reader:
            self._reader.join(READER_JOIN_TIMEOUT)
        with contextlib.suppress(OSError):
            self._conn.close()

    def _send(self, message: Any) -> None:
        try:
            with self._send_lock:
                self._conn.send(message)
        except (OSError, ValueError) as exc:  # closed, or reset by a dead peer
            raise WorkerGoneError("the Step Functions process is gone") from exc

    def _read(self) -> None:
        try:
            while True:
                message = self._conn.recv()
                if message[0] == "res":
                    _, rid, ok, value = message
                    with self._lock:
                        slot = self._waiting.get(rid)
                    if slot is not None:
                        slot.ok, slot.value = ok, value
                        slot.done.set()
                else:
                    _, rid, kind, payload = message
                    if self._inline is not None and self._inline(kind, payload):
                        self._answer(rid, kind, payload)
                    else:
                        self._run(functools.partial(self._answer, rid, kind, payload))
        except (EOFError, OSError, ValueError):
            pass
        finally:
            with self._lock:
                self.closed.set()
                waiting = list(self._waiting.values())
            for slot in waiting:
                slot.ok, slot.value = False, WorkerGoneError("the Step Functions process is gone")
                slot.done.set()

    def _answer(self, rid: int, kind: str, payload: Any) -> None:
        after = None
        try:
            value, ok = self._serve(kind, payload), True
            if isinstance(value, AfterReply):
                value, after = value.value, value.after
        except BaseException as exc:
            value, ok = self._describe_error(exc), False
        try:
            with contextlib.suppress(WorkerGoneError):
                self._send(("res", rid, ok, value))
        finally:
            if after is not None:
                try:
                    after()
                except Exception:
                    log.exception("work after answering a %s request failed", kind)


class Workers:
    """Threads for work that may block for long (an execution's Lambda task can wait on a model for minutes): each
    piece of work gets a thread at once, an idle one if there is one (starting a thread costs more than the work of
    a tool call's register step), a new one otherwise. A thread idle for `idle_seconds` ends."""

    def __init__(self, name: str, idle_seconds: float = 30.0) -> None:
        self._name = name
        self._idle_seconds = idle_seconds
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def run(self, work: Callable[[], None]) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1  # that thread is taken: the work is for it
                self._jobs.put(work)
                return
        threading.Thread(target=self._work, args=(work,), name=self._name, daemon=True).start()

    @property
    def idle(self) -> int:
        return self._idle

    def _work(self, work: Callable[[], None]) -> None:
        while True:
            try:
                work()
            except BaseException:
                log.exception("work of %s failed", self._name)
            with self._lock:
                self._idle += 1
            try:
                work = self._jobs.get(timeout=self._idle_seconds)
            except queue.Empty:
                with self._lock:
                    try:  # handed over just as the wait ended: do it
                        work = self._jobs.get_nowait()
                    except queue.Empty:
                        self._idle -= 1
                        return


# --- the gateway's side ---------------------------------------------------------------------------------------------


class StepFunctionsProcess:
    """The child process serving Step Functions, seen from the gateway."""

    def __init__(self, on_exit: Callable[[StepFunctionsProcess], None] | None = None) -> None:
        self._on_exit = on_exit
        """Called (in a thread of its own) when the child ends while the gateway runs."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._stopping = False
        self._sock: socket.socket | None = None
        self.channel: WorkerChannel | None = None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def running(self) -> bool:
        return self.channel is not None and not self.channel.closed.is_set()

    def spawn(self) -> None:
        """Start the child (it imports moto meanwhile); `connect` then waits for it."""
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "orbital.local.sfn_child", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                env=env,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C at the terminal is the gateway's to handle; it then closes ours
            )
        finally:
            theirs.close()
        self._sock = ours  # kept to shut down: closing a descriptor another thread reads from sends nothing
        self._conn = Connection(os.dup(ours.fileno()))

    def connect(
        self, functions: dict[str, Any], invoke: Callable[[str, bytes | str | None], tuple[bytes, bool]]
    ) -> None:
        """Wait for the child to be ready; from now on it runs `invoke(function, payload)` for its Lambda tasks."""
        if self._conn is None:
            raise WorkerGoneError("the Step Functions process was not started")

        def serve(kind: str, payload: Any) -> Any:
            if kind != "invoke":
                raise ValueError(f"unknown request {kind!r}")
            name, body = payload
            return invoke(name, body)

        self.channel = WorkerChannel(
            self._conn, serve, Workers("orbital-sfn-task").run, _describe, "orbital-sfn-gateway"
        )
        self.channel.request("ready", sorted(functions), timeout=START_TIMEOUT)
        threading.Thread(target=self._watch, args=(self.channel,), name="orbital-sfn-watch", daemon=True).start()

    def _watch(self, channel: WorkerChannel) -> None:
        channel.closed.wait()
        if self._stopping:
            return
        code = None
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self._proc.wait(timeout=5)
        log.error(
            "the local Step Functions process ended (exit code %s): the executions it ran (tool-call waits, agent "
            "turns) are lost",
            code,
        )
        if self._on_exit is not None:
            self._on_exit(self)

    def call(self, method: str, params: dict[str, Any], *, timeout: float = CALL_TIMEOUT) -> dict[str, Any]:
        """One Step Functions operation (`start_execution`, ...) with boto3's parameters: moto's result as a dict,
        or `Refused` with the AWS error; TimeoutError after `timeout` seconds without an answer."""
        channel = self.channel
        if channel is None:
            raise WorkerGoneError("the Step Functions process is not running")
        return dict(channel.request("sfn", (method, params), timeout=timeout))

    def stop(self) -> None:
        """End the child: it reads end of file (as when this process dies) and exits."""
        self._stopping = True
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
            self._sock = None
        if self.channel is not None:
            self.channel.close()
        elif self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def _describe(exc: BaseException) -> tuple[str, str, int]:
    if isinstance(exc, WorkerRefusedError):
        return exc.error_code, exc.message, exc.status
    log.error("local Step Functions request failed", exc_info=exc)
    return "InternalFailure", "local AWS emulation failed", 500


# --- the child's side -----------------------------------------------------------------------------------------------


INLINE_METHODS = frozenset(
    {"start_execution", "send_task_success", "send_task_failure", "send_task_heartbeat", "describe_execution"}
)
"""Step Functions requests the child answers on its reading thread, without a hop to another: each is a little of
moto's bookkeeping and never waits for the gateway (a Lambda task, which does, runs in an execution's thread)."""

_holding = threading.local()


def hold_execution_starts() -> None:
    """Let `held_starts` keep the executions a `StartExecution` creates from starting until its answer is sent.
    Idempotent."""
    from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

    original = ExecutionWorker.start
    if getattr(original, "_orbital_held", False):
        return

    def start(self: Any) -> None:
        held = getattr(_holding, "held", None)
        if held is None:
            original(self)
        else:
            held.append(functools.partial(original, self))

    start._orbital_held = True  # type: ignore[attr-defined]
    ExecutionWorker.start = start  # type: ignore[method-assign]


@contextlib.contextmanager
def held_starts() -> Iterator[list[Callable[[], None]]]:
    """Executions started in this block (on this thread) wait in the list it gives; `start_held` starts them."""
    held: list[Callable[[], None]] = []
    _holding.held = held
    try:
        yield held
    except BaseException:
        start_held(held)
        raise
    finally:
        _holding.held = None


def start_held(held: list[Callable[[], None]]) -> None:
    for start in held:
        start()
    held.clear()

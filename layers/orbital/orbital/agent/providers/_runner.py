"""The one retry and time-budget policy around every adapter.

Each attempt runs the adapter on a worker thread that hands its deltas back through a queue; the caller's thread
passes them to the sink, watches the deadline and the cancel event, and decides about retries:

- transient failures (429, 5xx, 529, connection errors, read timeouts) are retried (tenacity's loop) at most
  MAX_RETRIES times, with exponential backoff and jitter, or after Retry-After when the provider sends it;
- never once anything has reached the sink (a retry would repeat visible text), and never past `timeout_s`;
- `timeout_s` is the whole budget: each attempt gets what is left, and the caller gets a ModelError when it runs out
  even if a worker is still stuck in a read (the worker is told to stop and its stream is closed).
"""

from __future__ import annotations

import importlib
import logging
import queue
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tenacity import RetryCallState, Retrying, retry_if_exception_type

from orbital.agent.providers._errors import (
    EmptyResponseError,
    Failure,
    classify,
    describe,
    is_transient,
    retry_after,
    secrets_of,
    summary,
)
from orbital.agent.providers._resolve import resolve_provider
from orbital.agent.providers._types import Cancel, ModelError, ModelRequest, ProviderInfo, StreamSink

log = logging.getLogger("orbital.agent.providers")

MAX_RETRIES = 3
BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 20.0
_POLL_S = 0.1  # how often a waiting caller looks at its cancel event

ADAPTERS = {
    "anthropic": "orbital.agent.providers.anthropic",
    "openai": "orbital.agent.providers.openai",
    "google": "orbital.agent.providers.google",
    "bedrock": "orbital.agent.providers.bedrock",
}


@dataclass
class Attempt:
    """What an adapter gets for one try: the request, where to send it, the seconds it may take, and how to report
    deltas. It must call `on_close` with a function that closes its open stream, and stop when `stopped()`."""

    request: ModelRequest
    info: ProviderInfo
    timeout: float
    _events: queue.Queue[tuple[str, Any]] = field(repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _closers: list[Callable[[], None]] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def emit(self, kind: str, delta: str) -> None:
        if self._stop.is_set():
            raise _StoppedError()
        self._events.put((kind, delta))

    def on_close(self, closer: Callable[[], None], *, response: Any = None) -> None:
        """`closer` closes the attempt's open stream when the attempt is abandoned. With the stream's HTTP
        `response` (httpx), its socket is shut down first: a plain close from another thread does not end a read
        blocked on it, so the provider would see the connection open until its next chunk arrives."""
        if self.request.progress is not None:
            self.request.progress.reached = True  # the provider answered: its stream is open
        if response is not None:
            closer = _shutting_down(response, closer)
        with self._lock:
            stopped = self._stop.is_set()
            if not stopped:
                self._closers.append(closer)
        if stopped:
            _quietly(closer)

    def usage_seen(self, usage: dict[str, Any]) -> None:
        """The provider's own count of the call so far (kept for a call that ends without a reply)."""
        if self.request.progress is not None:
            self.request.progress.usage = dict(usage)

    def stopped(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        with self._lock:
            self._stop.set()
            closers, self._closers = self._closers, []
        for closer in closers:
            _quietly(closer)


class _StoppedError(Exception):
    """Raised inside a worker whose attempt was abandoned."""


def _shutting_down(response: Any, close: Callable[[], None]) -> Callable[[], None]:
    """`close`, after shutting down the socket under an httpx `response` (when it can be found)."""

    def closer() -> None:
        extensions = getattr(response, "extensions", None)
        stream = extensions.get("network_stream") if isinstance(extensions, dict) else None
        info = getattr(stream, "get_extra_info", None)
        sock = info("socket") if callable(info) else None
        if isinstance(sock, socket.socket):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # closed already
        close()

    return closer


def _quietly(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:
        log.debug("closing an abandoned stream failed", exc_info=True)


def _adapter(api: str) -> Callable[[Attempt], dict[str, Any]]:
    module = importlib.import_module(ADAPTERS[api])
    run: Callable[[Attempt], dict[str, Any]] = module.run
    return run


def _backoff(retry: int) -> float:
    """Full-jitter exponential backoff for the retry-th retry (0-based)."""
    ceiling = min(BACKOFF_MAX_S, BACKOFF_BASE_S * (2**retry))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


class _TransientError(Exception):
    """An attempt that failed in a way worth another try."""

    def __init__(self, failure: Failure) -> None:
        super().__init__("a transient model failure")  # the provider's words stay in `failure`, scrubbed when shown
        self.failure = failure


def _failure(state: RetryCallState) -> Failure:
    error = state.outcome.exception() if state.outcome is not None else None
    assert isinstance(error, _TransientError)
    return error.failure


def complete(request: ModelRequest, sink: StreamSink | None = None) -> dict[str, Any]:
    """Call the model and return the stored assistant message, streaming text and thinking into `sink`."""
    info = resolve_provider(request.config or {}, request.provider)
    secrets: tuple[str | None, ...] = secrets_of(info)
    budget = max(0.001, float(request.timeout_s))
    deadline = time.monotonic() + budget
    run = _adapter(info.api)
    emitted = False

    def once() -> dict[str, Any]:
        nonlocal emitted
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _timed_out(request)
        outcome = _attempt(run, request, info, remaining, deadline, sink)
        emitted = emitted or outcome.emitted
        if outcome.message is not None:
            return outcome.message
        exc = outcome.error
        assert exc is not None
        if isinstance(exc, ModelError):
            raise exc
        if isinstance(exc, EmptyResponseError):
            raise ModelError("other", "LLM returned empty response") from None
        failure = describe(exc)
        error = classify(failure, request.provider, request.model, secrets)
        if not is_transient(failure):
            log.warning("model call to %s/%s failed: %s", request.provider, request.model, error.message)
            raise error from None
        if emitted:
            raise ModelError(
                "transient",
                f"Model stream from {request.provider} broke off after output began: {summary(failure, secrets)}",
                True,
            ) from None
        raise _TransientError(failure)

    def wait(state: RetryCallState) -> float:
        asked = retry_after(_failure(state).headers)
        return _backoff(state.attempt_number - 1) if asked is None else asked

    def stop(state: RetryCallState) -> bool:
        return state.attempt_number > MAX_RETRIES or time.monotonic() + state.upcoming_sleep >= deadline

    def give_up(state: RetryCallState) -> dict[str, Any]:
        failure = _failure(state)
        if state.attempt_number > MAX_RETRIES:
            message = f"Model provider unavailable after {MAX_RETRIES} retries: {summary(failure, secrets)}"
        else:
            message = (
                f"Model provider unavailable (no time left to retry within {request.timeout_s:g}s): "
                f"{summary(failure, secrets)}"
            )
        raise ModelError("transient", message, True) from None

    def announce(state: RetryCallState) -> None:
        log.warning(
            "model call to %s/%s failed (%s); retry %d of %d in %.1fs",
            request.provider,
            request.model,
            summary(_failure(state), secrets),
            state.attempt_number,
            MAX_RETRIES,
            state.upcoming_sleep,
        )

    retry: Retrying = Retrying(
        retry=retry_if_exception_type(_TransientError),
        wait=wait,
        stop=stop,
        sleep=lambda seconds: pause(seconds, request.cancel),
        before_sleep=announce,
        retry_error_callback=give_up,
    )
    return retry(once)


def pause(seconds: float, cancel: threading.Event | None) -> None:
    """The wait between two attempts; a cancel during it ends the call (tests put a recorder here)."""
    if cancel is None:
        time.sleep(seconds)
        return
    if cancel.wait(seconds):
        raise _cancelled()


def _timed_out(request: ModelRequest) -> ModelError:
    return ModelError("transient", f"Model call timed out after {request.timeout_s:g}s", True)


def _cancelled() -> ModelError:
    return ModelError("cancelled", "Model call cancelled")


@dataclass
class _Outcome:
    message: dict[str, Any] | None = None
    error: BaseException | None = None
    emitted: bool = False


def _attempt(
    run: Callable[[Attempt], dict[str, Any]],
    request: ModelRequest,
    info: ProviderInfo,
    remaining: float,
    deadline: float,
    sink: StreamSink | None,
) -> _Outcome:
    events: queue.Queue[tuple[str, Any]] = queue.Queue()
    attempt = Attempt(request, info, remaining, events)

    def work() -> None:
        try:
            message = run(attempt)
        except _StoppedError:
            return
        except BaseException as exc:
            if not attempt.stopped():
                events.put(("error", exc))
            return
        events.put(("done", message))

    if request.progress is not None:
        request.progress.sent = True
    worker = threading.Thread(target=work, name=f"model-{info.name}", daemon=True)
    forget = request.cancel.on_set(attempt.stop) if isinstance(request.cancel, Cancel) else None
    worker.start()
    outcome = _Outcome()
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _timed_out(request)
            if request.cancel is not None:
                if request.cancel.is_set():
                    raise _cancelled()
                left = min(left, _POLL_S)
            try:
                kind, value = events.get(timeout=left)
            except queue.Empty:
                continue
            if kind in ("text", "thinking") and request.progress is not None:
                request.progress.streamed.append(value)
            if kind == "text":
                outcome.emitted = True
                if sink is not None:
                    sink.text(value)
            elif kind == "thinking":
                outcome.emitted = True
                if sink is not None:
                    sink.thinking(value)
            elif kind == "done":
                outcome.message = value
                return outcome
            else:
                outcome.error = value
                if request.progress is not None and not request.progress.reached:
                    request.progress.sent = False  # refused before any stream (an HTTP error, no connection)
                return outcome
    except BaseException:
        attempt.stop()
        raise
    finally:
        if forget is not None:
            forget()

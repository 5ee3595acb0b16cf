"""The provider layer's data types: what the agent loop asks for, what it may get back, and how a call fails."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

THINKING_LEVELS = ("minimal", "low", "medium", "high", "xhigh")

# Token budgets for the thinking levels where the wire takes a number (Anthropic, Bedrock/Claude, Gemini 2.x).
THINKING_BUDGETS = {"minimal": 1024, "low": 4096, "medium": 10000, "high": 20000, "xhigh": 32000}

DEFAULT_MAX_TOKENS = 8192

ERROR_KINDS = ("auth", "not_found", "overflow", "transient", "bad_request", "cancelled", "other")


class Memo(Protocol):
    """What was made of a session's history for earlier calls (`orbital.store.history.MessageMemo`)."""

    def get(self, kind: str, message: Any, make: Callable[[Any], T]) -> T: ...

    def owns(self, message: Any) -> bool: ...

    def prefix(self, kind: str, messages: Sequence[Any]) -> tuple[int, Any]: ...

    def keep_prefix(self, kind: str, messages: Sequence[Any], count: int, state: Any) -> None: ...


class Cancel(threading.Event):
    """A `ModelRequest.cancel` whose `set()` also closes the call's open stream at once, in the thread that sets
    it (`/stop`): the provider sees its connection closed before anything else is told of the stop. A plain
    `threading.Event` works too; the call then notices it within a tenth of a second."""

    def __init__(self) -> None:
        super().__init__()
        self._guard = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run `callback` when this is set (at once if it is already); returns how to take it back."""
        with self._guard:
            if not self.is_set():
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        callback()
        return lambda: None

    def _forget(self, callback: Callable[[], None]) -> None:
        with self._guard:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    def set(self) -> None:
        with self._guard:
            super().set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()


@dataclass
class Progress:
    """How far a model call got, for counting what it spent when it ends without a reply (a stop, a stream that
    broke off): `sent` once a request has gone to the provider (an attempt was in flight), `reached` once the
    provider answered with a stream, the text and reasoning streamed so far, and the provider's own usage when it
    sent one."""

    sent: bool = False
    reached: bool = False
    streamed: list[str] = field(default_factory=list)
    usage: dict[str, Any] | None = None

    def streamed_text(self) -> str:
        return "".join(self.streamed)


@dataclass
class ModelRequest:
    """One model call. `messages` are stored-format messages (images already hydrated to base64)."""

    provider: str
    model: str
    system: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    thinking: str | None = None
    max_tokens: int | None = None
    timeout_s: float = 300.0
    config: dict[str, Any] | None = None
    cancel: threading.Event | None = None
    """Set it (e.g. on /stop) to end the call at once with ModelError(kind="cancelled")."""
    progress: Progress | None = None
    """Filled in as the call goes (`Progress`), for whoever counts what a call that gave no reply spent."""
    memo: Memo | None = None
    """Where a provider keeps the wire form of `messages` for the next call of the session (the history grows by a
    few messages a call: only those are converted, `_convert.incremental`); its values are shared, never changed."""

    def thinking_level(self) -> str | None:
        level = (self.thinking or "").strip().lower()
        return level if level in THINKING_LEVELS else None


class StreamSink(Protocol):
    def text(self, delta: str) -> None: ...

    def thinking(self, delta: str) -> None: ...


class ModelError(Exception):
    """A failed model call. `message` is safe to show a user: it never carries a secret."""

    def __init__(self, kind: str, message: str, retryable: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retryable = retryable
        self.status = status

    def __repr__(self) -> str:
        return f"ModelError(kind={self.kind!r}, message={self.message!r}, retryable={self.retryable!r})"


@dataclass(frozen=True)
class ProviderInfo:
    """Where and how to reach one provider. `api` is the wire API: anthropic | openai | google | bedrock."""

    name: str
    api: str
    base_url: str | None
    api_key: str | None = field(default=None, repr=False)
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    """`providers.<name>.headers`: credentials, like the key, so neither is in the repr."""
    region: str | None = None
    local: bool = False
    settings: dict[str, Any] = field(default_factory=dict, repr=False)
    """The provider's `providers.<name>` section of the configuration (may be empty)."""

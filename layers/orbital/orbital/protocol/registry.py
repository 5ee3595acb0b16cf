"""The one method registry: wire name -> params model, result model, handler, allowed modes; and the hooks the
families hang on the layers below them (socket loss, node connect, deferred-call timeouts, chunk frames, workflow
steps, a run's replies and end, native tools that need a family's layer).

Method modules each own a `Router`; `orbital.methods.registry()` includes them explicitly. Including the same
method name, call kind or workflow step twice raises, so nothing can be silently shadowed. Hooks travel with the
router rather than being appended to module globals at import time: what runs is what the registry holds, whichever
entry point (Lambda, local gateway, test) got there first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict

from orbital.domain import roles

if TYPE_CHECKING:
    from orbital.engines.deferred import PendingCall
    from orbital.ports.services import Services
    from orbital.protocol.context import CallContext
    from orbital.store.connections import Connection
    from orbital.store.subscriptions import Subscription
    from orbital.tools.native import ToolEnv

Handler = Callable[["CallContext", Any], Any]
SocketGone = Callable[["Services", "Connection"], None]
"""(services, connection) after a socket gave up its registration."""
NodeConnected = Callable[["CallContext", str, "str | None"], None]
"""(ctx, node_id, previous_connection_id) after a node registered."""
BinaryFrame = Callable[["Services", str, bytes], None]
"""(services, connection_id, payload) for a binary WebSocket frame."""
BinFrame = Callable[["Services", str, dict[str, Any]], "dict[str, Any] | None"]
"""(services, connection_id, frame) for a `{"type": "bin"}` text frame; a dict returned is the reply."""
CallTimeout = Callable[["Services", "PendingCall"], None]
"""(services, call) when a deferred call of the kind timed out (already claimed)."""
CallNodeLost = Callable[["Services", "PendingCall", str], None]
"""(services, call, reason) when the node of a deferred call of the kind went away (already claimed)."""
WorkflowStep = Callable[["Services", dict[str, Any]], dict[str, Any]]
"""(services, event) -> output of a state machine task (`{"step": name, ...}`)."""
DialectFrame = Callable[["Services", "DialectInbound"], "list[Any]"]
"""(services, inbound) -> the frames to send back, in order (a dialect's translator: `orbital.dialects`)."""
RunEventEncoder = Callable[["Services", "Subscription", dict[str, Any]], "list[Any]"]
"""(services, subscription, chat payload) -> the frames a dialect socket gets for one event of its run."""
RunReply = Callable[["Services", str, dict[str, Any], str, "str | None"], None]
"""(services, session_key, run, state, text) for a run's reply texts as they come: `partial` while it runs, then
`final` (its reply) or `error` (what it ended with)."""
RunEnded = Callable[["Services", str, dict[str, Any], "str | None", "str | None"], None]
"""(services, session_key, run, reply, error) once a run has ended: its reply, or the error it ended with."""
ApprovalRequested = Callable[["Services", dict[str, Any], dict[str, Any]], None]
"""(services, approval, run) when a run pauses for a tool approval (the approval as clients see it)."""
ApprovalResolved = Callable[["Services", dict[str, Any], dict[str, Any]], None]
"""(services, approval, resolution) once an approval is decided (`{approvalId, sessionKey, runId, tool, decision, by,
via, decidedAt}`)."""
NativeTool = Callable[["ToolEnv", dict[str, Any]], Any]
"""(env, args) -> the result of a native `gsv__*` tool that answers at once; raises `ToolError` on failure."""


@dataclass(frozen=True)
class DialectClose:
    """Among a translator's frames: close the socket after the frames before it (saying why first, as every close
    of the gateway does)."""

    code: int
    reason: str


@dataclass(frozen=True)
class DialectInbound:
    """One text frame of a socket that speaks another gateway's protocol (or whose first frame says it does)."""

    connection_id: str
    text: str
    frame: Any
    """`text` parsed as JSON (None when it is not JSON)."""
    conn: Connection | None
    """The socket's record: None before its dialect has accepted it."""


F = TypeVar("F")


CLIENT = frozenset({"client"})
"""Operators' sockets: CLIs, UIs, the console."""
NODE = frozenset({"node"})
"""Tool hosts: they answer the calls addressed to them."""
CHANNEL = frozenset({"channel"})
"""Messenger bridges (third-party code): they hand in messages and answer control calls, nothing more."""
EVERY_MODE = CLIENT | NODE | CHANNEL
"""Every connection mode there is."""


class Params(BaseModel):
    """Base for method params: unknown fields are ignored, as GSV does."""

    model_config = ConfigDict(extra="ignore")


class NoParams(Params):
    pass


class Result(BaseModel):
    """Base for documented result shapes (validated in the contract tests)."""

    model_config = ConfigDict(extra="allow")


class OkResult(Result):
    """`{ok}`: the step was taken."""

    ok: bool


class AckResult(Result):
    """`{ok, dropped?}`: the message was taken (`dropped` when it was taken and let go)."""

    ok: bool
    dropped: bool | None = None


def refusal_prefix(method: str, mode: str) -> str:
    """The start of every refusal for a connection's mode (GSV's last protocol-1 release ends its message here, before
    the mode; Orbital names the mode and says more after it)."""
    return f"Method {method} not allowed for mode {mode}"


@dataclass(frozen=True)
class MethodSpec:
    name: str
    handler: Handler
    params: type[BaseModel]
    result: type[BaseModel] | None
    summary: str
    modes: frozenset[str]
    """Connection modes allowed to call the method; every method names them (deny by default). `connect` is also
    the one method a socket may call before it has connected."""
    scopes: Mapping[str, str]
    """Mode -> the scope (`orbital.domain.roles`) a connection of that mode needs to call the method: one for every
    mode of `modes`. Most methods need the same scope whatever the mode (`Router.method`'s `scope` as a string)."""
    mode_error: tuple[int, str] | None = None
    """Code and the specific sentence for a socket whose mode is not allowed (GSV's own, where the seed's GSV had
    one; None: 403 and `only {modes} connections may call it`). See `refusal`."""
    deferred: bool = False
    """The response is sent later (tool.invoke, logs.get)."""
    reads_only: bool = False
    """Answered from what the gateway holds: it reads, posts to no socket and waits for nothing. A local gateway may
    answer it on its event loop instead of handing it to a thread (`Registry.event_loop_methods`)."""
    posts_without_waiting: bool = False
    """A few table reads and writes and posts to sockets, never waiting for an answer from a socket, an execution or
    a model: a local gateway whose AWS calls and management API are answered in its own process may answer it on its
    event loop too (`Registry.event_loop_methods(posts_in_process=True)`)."""
    socket_only: bool = False
    """Meaningful only on a socket (`connect`, its handshake): not offered over HTTP although clients may call it."""

    def scope_for(self, mode: str) -> str:
        """The scope a connection of `mode` needs (`mode` one of `modes`)."""
        return self.scopes[mode]

    @property
    def scope_text(self) -> str:
        """The scope as the reference shows it: one name, or `scope (mode)` per mode where they differ."""
        distinct = set(self.scopes.values())
        if len(distinct) == 1:
            return next(iter(distinct))
        return ", ".join(f"{scope} ({mode})" for mode, scope in sorted(self.scopes.items()))

    def refusal(self, mode: str) -> tuple[int, str]:
        """Code and message for a socket of `mode`, which may not call the method: GSV's late sentence
        `Method {method} not allowed for mode {mode}`, then the specific one (GSV's clients of 2026-02 match on
        that one, those of 2026-03 on the first)."""
        code, detail = self.mode_error or (403, f"only {' or '.join(sorted(self.modes))} connections may call it")
        return code, f"{refusal_prefix(self.name, mode)}: {detail}"

    @property
    def http(self) -> bool:
        """Also offered as `POST /api/v1/{name}` (ADR 0029): every method a client socket may call, but those that
        only make sense on a socket."""
        return "client" in self.modes and not self.socket_only


@dataclass
class Hooks:
    """What the runtime, the engines and the agent call back into the families for. Lists run in the order the
    routers were included; the dicts are keyed by deferred-call kind (or step, dialect or tool name) and each key has
    exactly one owner."""

    on_node_gone: list[SocketGone] = field(default_factory=list)
    on_client_gone: list[SocketGone] = field(default_factory=list)
    on_channel_gone: list[SocketGone] = field(default_factory=list)
    on_node_connected: list[NodeConnected] = field(default_factory=list)
    binary_handlers: list[BinaryFrame] = field(default_factory=list)
    bin_handlers: list[BinFrame] = field(default_factory=list)
    call_timeout: dict[str, CallTimeout] = field(default_factory=dict)
    """Deferred-call kind -> reaction to its timeout (default: a 504 to the caller)."""
    call_node_lost: dict[str, CallNodeLost] = field(default_factory=dict)
    """Deferred-call kind -> reaction to its node's loss (default: a 503 to the caller)."""
    workflow_steps: dict[str, WorkflowStep] = field(default_factory=dict)
    """Step name -> task of a family's state machine, beside the runtime's own deferred-call steps."""
    dialect_frames: dict[str, DialectFrame] = field(default_factory=dict)
    """Dialect -> its translator of inbound frames."""
    run_event_encoders: dict[str, RunEventEncoder] = field(default_factory=dict)
    """Dialect -> what its subscribed sockets get for each event of a run."""
    on_run_reply: list[RunReply] = field(default_factory=list)
    """What the agent calls with a run's reply texts (a channel delivers them)."""
    on_run_ended: list[RunEnded] = field(default_factory=list)
    """What the agent calls once a run has ended, after its reply (a cron job's run record is written)."""
    on_approval_requested: list[ApprovalRequested] = field(default_factory=list)
    """What the agent calls when a run pauses for a tool approval: `(services, approval, run)` (a channel offers
    buttons)."""
    on_approval_resolved: list[ApprovalResolved] = field(default_factory=list)
    """What the agent calls once an approval is decided: `(services, approval, resolution)` (a channel edits its
    prompt to show the decision)."""
    native_tools: dict[str, NativeTool] = field(default_factory=dict)
    """Tool name -> a native tool that needs more than the tools layer has (a channel, an agent run)."""

    def clashes(self, other: Hooks) -> list[str]:
        """The keys `other` would take over from this one."""
        found = [f"call_timeout[{k}]" for k in other.call_timeout if k in self.call_timeout]
        found += [f"call_node_lost[{k}]" for k in other.call_node_lost if k in self.call_node_lost]
        found += [f"workflow_steps[{k}]" for k in other.workflow_steps if k in self.workflow_steps]
        found += [f"dialect_frames[{k}]" for k in other.dialect_frames if k in self.dialect_frames]
        found += [f"run_event_encoders[{k}]" for k in other.run_event_encoders if k in self.run_event_encoders]
        found += [f"native_tools[{k}]" for k in other.native_tools if k in self.native_tools]
        return found

    def extend(self, other: Hooks) -> None:
        clashes = self.clashes(other)
        if clashes:
            raise ValueError(f"hook registered twice: {', '.join(clashes)}")
        self.on_node_gone.extend(other.on_node_gone)
        self.on_client_gone.extend(other.on_client_gone)
        self.on_channel_gone.extend(other.on_channel_gone)
        self.on_node_connected.extend(other.on_node_connected)
        self.binary_handlers.extend(other.binary_handlers)
        self.bin_handlers.extend(other.bin_handlers)
        self.call_timeout.update(other.call_timeout)
        self.call_node_lost.update(other.call_node_lost)
        self.workflow_steps.update(other.workflow_steps)
        self.dialect_frames.update(other.dialect_frames)
        self.run_event_encoders.update(other.run_event_encoders)
        self.on_run_reply.extend(other.on_run_reply)
        self.on_run_ended.extend(other.on_run_ended)
        self.on_approval_requested.extend(other.on_approval_requested)
        self.on_approval_resolved.extend(other.on_approval_resolved)
        self.native_tools.update(other.native_tools)


def _keyed(table: dict[str, F], key: str, what: str) -> Callable[[F], F]:
    def register(func: F) -> F:
        if key in table:
            raise ValueError(f"hook registered twice: {what}[{key}]")
        table[key] = func
        return func

    return register


def _scopes(name: str, modes: frozenset[str], scope: str | Mapping[str, str]) -> dict[str, str]:
    """Mode -> scope for a method: every mode gets a scope `roles.SCOPES` knows (deny by default: a method cannot
    leave one out)."""
    by_mode = dict.fromkeys(modes, scope) if isinstance(scope, str) else dict(scope)
    if set(by_mode) != set(modes):
        raise ValueError(f"{name}: scope must name every mode of {sorted(modes)}, not {sorted(by_mode)}")
    unknown = sorted({s for s in by_mode.values() if s not in roles.SCOPES})
    if unknown:
        raise ValueError(f"{name}: unknown scope {', '.join(unknown)} (one of {', '.join(roles.SCOPES)})")
    return dict(sorted(by_mode.items()))


@dataclass
class Router:
    family: str
    methods: dict[str, MethodSpec] = field(default_factory=dict)
    hooks: Hooks = field(default_factory=Hooks)

    def method(
        self,
        name: str,
        *,
        params: type[BaseModel] = NoParams,
        result: type[BaseModel] | None = None,
        modes: frozenset[str],
        scope: str | Mapping[str, str],
        mode_error: tuple[int, str] | None = None,
        deferred: bool = False,
        reads_only: bool = False,
        posts_without_waiting: bool = False,
        socket_only: bool = False,
    ) -> Callable[[Handler], Handler]:
        allowed = frozenset(modes)
        if not allowed or not allowed <= EVERY_MODE:
            raise ValueError(f"{name}: modes must be a non-empty subset of {sorted(EVERY_MODE)}, not {sorted(allowed)}")
        scopes = _scopes(name, allowed, scope)

        def register(func: Handler) -> Handler:
            if name in self.methods:
                raise ValueError(f"method registered twice: {name}")
            summary = (func.__doc__ or "").strip()
            self.methods[name] = MethodSpec(
                name=name,
                handler=func,
                params=params,
                result=result,
                summary=summary,
                modes=allowed,
                scopes=scopes,
                mode_error=mode_error,
                deferred=deferred,
                reads_only=reads_only,
                posts_without_waiting=posts_without_waiting,
                socket_only=socket_only,
            )
            return func

        return register

    # --- hooks: decorators that return the function unchanged ------------------------------------------------

    def on_node_gone(self, func: SocketGone) -> SocketGone:
        self.hooks.on_node_gone.append(func)
        return func

    def on_client_gone(self, func: SocketGone) -> SocketGone:
        self.hooks.on_client_gone.append(func)
        return func

    def on_channel_gone(self, func: SocketGone) -> SocketGone:
        self.hooks.on_channel_gone.append(func)
        return func

    def on_node_connected(self, func: NodeConnected) -> NodeConnected:
        self.hooks.on_node_connected.append(func)
        return func

    def on_binary_frame(self, func: BinaryFrame) -> BinaryFrame:
        self.hooks.binary_handlers.append(func)
        return func

    def on_bin_frame(self, func: BinFrame) -> BinFrame:
        self.hooks.bin_handlers.append(func)
        return func

    def on_call_timeout(self, kind: str) -> Callable[[CallTimeout], CallTimeout]:
        return _keyed(self.hooks.call_timeout, kind, "call_timeout")

    def on_call_node_lost(self, kind: str) -> Callable[[CallNodeLost], CallNodeLost]:
        return _keyed(self.hooks.call_node_lost, kind, "call_node_lost")

    def workflow_step(self, name: str) -> Callable[[WorkflowStep], WorkflowStep]:
        return _keyed(self.hooks.workflow_steps, name, "workflow_steps")

    def dialect_frame(self, dialect: str) -> Callable[[DialectFrame], DialectFrame]:
        return _keyed(self.hooks.dialect_frames, dialect, "dialect_frames")

    def run_events(self, dialect: str) -> Callable[[RunEventEncoder], RunEventEncoder]:
        return _keyed(self.hooks.run_event_encoders, dialect, "run_event_encoders")

    def on_run_reply(self, func: RunReply) -> RunReply:
        self.hooks.on_run_reply.append(func)
        return func

    def on_run_ended(self, func: RunEnded) -> RunEnded:
        self.hooks.on_run_ended.append(func)
        return func

    def on_approval_requested(self, func: ApprovalRequested) -> ApprovalRequested:
        self.hooks.on_approval_requested.append(func)
        return func

    def on_approval_resolved(self, func: ApprovalResolved) -> ApprovalResolved:
        self.hooks.on_approval_resolved.append(func)
        return func

    def native_tool(self, name: str) -> Callable[[NativeTool], NativeTool]:
        return _keyed(self.hooks.native_tools, name, "native_tools")


class Registry:
    def __init__(self) -> None:
        self._methods: dict[str, MethodSpec] = {}
        self._families: dict[str, list[str]] = {}
        self.hooks = Hooks()
        """Every included router's hooks, in inclusion order."""

    def include(self, router: Router) -> None:
        """Add a family's methods and hooks; a name, kind or step some family already owns raises (and nothing of
        the router is added)."""
        twice = [name for name in router.methods if name in self._methods]
        if twice:
            raise ValueError(f"method registered twice: {', '.join(twice)}")
        self.hooks.extend(router.hooks)
        for name, spec in router.methods.items():
            self._methods[name] = spec
            self._families.setdefault(router.family, []).append(name)

    def get(self, name: str) -> MethodSpec | None:
        return self._methods.get(name)

    def names(self) -> list[str]:
        return list(self._methods)

    def event_loop_methods(self, *, posts_in_process: bool = False) -> frozenset[str]:
        """The methods a local gateway may answer on its event loop: those that only read (`MethodSpec.reads_only`)
        and, when its posts and AWS calls are answered in its own process (`posts_in_process`), those that post
        without waiting (`MethodSpec.posts_without_waiting`)."""
        return frozenset(
            name
            for name, spec in self._methods.items()
            if spec.reads_only or (posts_in_process and spec.posts_without_waiting)
        )

    def http_methods(self) -> list[MethodSpec]:
        """The methods also offered over HTTP (`MethodSpec.http`), in registry order."""
        return [spec for spec in self._methods.values() if spec.http]

    def families(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in self._families.items()}

    def __iter__(self) -> Iterator[MethodSpec]:
        return iter(self._methods.values())

    def __len__(self) -> int:
        return len(self._methods)

"""Tools that run on the client socket that started a run (WindieOS's client manifest), and the per-run narrowing of
the tool list a dialect's client asks for.

A dialect's translator keeps what a socket declared beside its connection record (`keys.connection_tools`:
`{"tools": [{name, description, inputSchema}]}`) and starts the socket's runs with `chat.send` and the internal
`clientTools: True` plus a `toolPolicy` (`{mode, available?, disabled?, capabilities?}`), which follow the run in its
origin. Each turn step of such a run reads the socket's tools once (`for_run`): the model is offered the tools the
policy leaves (`narrowed`), the socket's own under their bare names; a call of one of those is a deferred call of kind
`CLIENT_TOOL` owned by the socket (`owner`), answered by the socket, by its loss (the dialect's `on_client_gone`
fails every call it owns at once) or by the run's wait-group deadline (`timeouts.toolMs`) — node tools' machinery.
The frame that asks the socket comes from the dialect's run-event encoder (`CALL_STATE`), with what the run's
subscription says about the turn. A run whose socket is gone has no client tools; every other run never reads a
socket's tools here. A `restricted` policy (a socket without the gateway's credential: a WindieOS install, a guest of
the owner's gateway) reaches no backend tool at all (`reachable`), only its own, and its runs are given a system
prompt built without any workspace file and name no connected node (`is_guest`, `reachable_nodes`).
"""

from __future__ import annotations

import copy
import logging
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orbital.store import keys
from orbital.store.subscriptions import Subscription

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.store.connections import NodeEntry

log = logging.getLogger("orbital.agent.client_tools")

CLIENT_TOOLS = "clientTools"
"""In a run's origin: the run was started by a socket that may have tools of its own."""
OWN_TOOLS = "ownTools"
"""In a run's origin: its socket declared tools of its own (else only its policy narrows the run's tools)."""
CALL_STATE = "clientToolCall"
"""The run-event state a dialect's encoder turns into the frame asking its socket to run a tool (never broadcast:
the tool dispatch hands it to the encoder of the socket's subscription and fails the call if it cannot be posted)."""
MODES = ("explicit", "default_plus_client", "client_only")
CAPABILITY_MARKERS = {
    "web_search": ("websearch", "web_search", "searchweb", "search_web"),
    "browser": ("browser",),
    "ocr": ("ocr",),
    "vision": ("vision",),
    "embeddings": ("embedding",),
}
"""A capability turned off removes the backend tools whose (lower-case) name contains one of its markers."""
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""A tool name every provider accepts."""


def owner(connection_id: str) -> str:
    """The owner id the calls of a socket's tools are indexed under (never a node's: `connect` refuses node ids
    starting with `~`, so no node can answer, or fail, these calls)."""
    return f"~client:{connection_id}"


@dataclass
class ClientTools:
    """One run's view of the tools of the socket that started it."""

    connection_id: str
    tools: list[dict[str, Any]] = field(default_factory=list)
    policy: dict[str, Any] = field(default_factory=dict)
    offered: set[str] | None = None
    """The names the model was offered (`offer`): a call of any other name is refused, not run."""
    own: set[str] = field(default_factory=set)
    """The names of the socket's own tools among those offered: only a call of one of these goes to the socket (a
    backend tool of the same name, e.g. of a node that connected after the handshake, is the backend's)."""

    @property
    def owner(self) -> str:
        return owner(self.connection_id)

    def names(self) -> set[str]:
        return {str(t.get("name")) for t in self.tools}

    def offer(self, backend: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The tools the run offers the model (`narrowed`), remembering which names were offered and which of those
        are the socket's own (`offered`, `own`: what dispatch refuses and what it routes to the socket)."""
        chosen = narrowed(backend, self.tools, self.policy)
        taken = {str(t.get("name")) for t in backend}
        self.offered = {str(t.get("name")) for t in chosen}
        self.own = (self.names() - taken) & self.offered
        return chosen


def policy_of_run(run: dict[str, Any]) -> dict[str, Any] | None:
    """The tool policy a run was started with (None: a run of no client tools, the common case)."""
    origin = run.get("origin") if isinstance(run.get("origin"), dict) else {}
    if not origin or not origin.get(CLIENT_TOOLS):
        return None
    policy = origin.get("toolPolicy")
    return policy if isinstance(policy, dict) else {}


def for_run(services: Services, run: dict[str, Any]) -> ClientTools | None:
    """The client tools and policy of a run started by a socket with tools of its own; None for every other run
    (without reading anything)."""
    policy = policy_of_run(run)
    if policy is None:
        return None
    connection_id = run["origin"].get("connectionId")
    if not isinstance(connection_id, str):
        return ClientTools("", [], policy)
    if not run["origin"].get(OWN_TOOLS):  # a policy alone: nothing to read
        return ClientTools(connection_id, [], policy)
    return ClientTools(connection_id, declared(services, connection_id), policy)


def save(services: Services, connection_id: str, tools: list[dict[str, Any]]) -> None:
    """Keep the tools a socket declared, beside its connection record (not in it: that record is read for every
    frame of the socket, these only by its runs' steps)."""
    services.table.put(
        keys.connection_tools(connection_id),
        {"tools": tools},
        ttl=int(time.time()) + services.connections.ttl_seconds,
    )


def declared(services: Services, connection_id: str) -> list[dict[str, Any]]:
    """The tools a socket declared (none when it declared none, or is gone)."""
    rec = services.table.get(keys.connection_tools(connection_id))
    tools = rec.data.get("tools") if rec is not None else None
    return [t for t in tools or [] if isinstance(t, dict) and isinstance(t.get("name"), str)]


def forget(services: Services, connection_id: str) -> None:
    services.table.delete(keys.connection_tools(connection_id))


def _names(value: Any) -> set[str] | None:
    if not isinstance(value, list):
        return None
    return {v for v in value if isinstance(v, str)}


def _capability_off(name: str, capabilities: set[str]) -> bool:
    lowered = name.lower()
    return any(marker in lowered for cap in capabilities for marker in CAPABILITY_MARKERS.get(cap, ()))


def is_guest(policy: dict[str, Any]) -> bool:
    """Whether a run under `policy` is a guest's (a socket without the gateway's credential, e.g. a WindieOS install):
    no backend tool, a system prompt without the owner's workspace files, no memories written to the workspace."""
    return bool(policy.get("restricted"))


def reachable(backend: list[dict[str, Any]], policy: dict[str, Any]) -> list[dict[str, Any]]:
    """The backend tools a run under `policy` may be offered at all, before its `mode` and lists narrow them: every
    one, or none for a `restricted` policy (a guest: the agent's workspace is the owner's, shared by every install,
    and the nodes and the gateway are the owner's too)."""
    return [] if is_guest(policy) else list(backend)


def reachable_nodes(nodes: list[NodeEntry], policy: dict[str, Any]) -> list[NodeEntry]:
    """The connected nodes a run under `policy` is told about (its system prompt's hosts): none for a `restricted`
    one, whose runs cannot use them."""
    return [] if policy.get("restricted") else nodes


def narrowed(
    backend: list[dict[str, Any]], client: list[dict[str, Any]], policy: dict[str, Any]
) -> list[dict[str, Any]]:
    """The tools a run offers the model: by `mode`, `client_only` the client's alone, `explicit` those named in
    `available` (backend's or the client's; without that list the client's alone), `default_plus_client` (the
    default) every backend tool and the client's; then without those named in `disabled` and the backend tools of a
    `capabilities` turned off. A client tool never takes a backend tool's name, whether the run may reach that tool
    or not (refused when it was declared; dropped here when the backend tool appeared later, e.g. a node that
    connected after the handshake). A `restricted` policy (a socket that holds no credential of the gateway's, e.g.
    a WindieOS install) keeps none of the backend's tools: its own alone."""
    taken = {str(t.get("name")) for t in backend}
    backend = reachable(backend, policy)
    mode = policy.get("mode") if policy.get("mode") in MODES else "default_plus_client"
    available = _names(policy.get("available"))
    disabled = _names(policy.get("disabled")) or set()
    capabilities = _names(policy.get("capabilities")) or set()
    own = [t for t in client if t.get("name") not in taken]
    if mode == "client_only":
        chosen = list(own)
    elif mode == "explicit":
        chosen = list(own) if available is None else [t for t in backend + own if t.get("name") in available]
    else:
        chosen = backend + own
    own_names = {str(t.get("name")) for t in own}
    return [
        t
        for t in chosen
        if t.get("name") not in disabled
        and (t.get("name") in own_names or not _capability_off(str(t.get("name")), capabilities))
    ]


def function_of(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool definition (`{name, description, inputSchema}`) as the function an OpenAI tool object declares:
    `{name, description?, parameters}` (a copy of the schema; an empty object schema when there is none)."""
    schema = tool.get("inputSchema")
    function: dict[str, Any] = {"name": tool.get("name")}
    if tool.get("description"):
        function["description"] = tool["description"]
    function["parameters"] = copy.deepcopy(schema) if isinstance(schema, dict) else {"type": "object", "properties": {}}
    return function


def openai_schemas(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool definitions as OpenAI function objects, `{type: "function", function}` (what WindieOS shows as
    `tool-schemas`)."""
    return [{"type": "function", "function": function_of(tool)} for tool in tools]


def send_call(
    services: Services,
    client: ClientTools,
    run_id: str,
    call_id: str,
    name: str,
    arguments: dict[str, Any],
    tool_call_id: str,
) -> bool:
    """Ask the socket to run one of its tools, through the encoder of its subscription to the run. False when it
    cannot be asked (it no longer follows the run, it is gone): the caller fails the call at once."""
    rec = services.table.get(keys.run_subscription(run_id, client.connection_id))
    sub = Subscription.from_record(rec) if rec is not None else None
    encode = services.hooks.run_event_encoders.get(sub.dialect) if sub is not None else None
    if sub is None or encode is None:
        return False
    payload = {
        "runId": run_id,
        "state": CALL_STATE,
        "callId": call_id,
        "toolName": name,
        "arguments": arguments,
        "toolCallId": tool_call_id,
    }
    frames = encode(services, sub, payload)
    if not frames:
        return False
    try:
        return all(services.push(client.connection_id, frame) for frame in frames)
    except Exception as exc:
        log.warning("asking %s to run %s failed: %s", client.connection_id, name, type(exc).__name__)
        return False

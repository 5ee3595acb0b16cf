"""Every DynamoDB key and S3 key the gateway builds. No key string is assembled anywhere else.

Single table: `PK`, `SK`, `GSI1PK`/`GSI1SK` (index `GSI1`), `ttl` (epoch seconds, DynamoDB TTL attribute).

| entity              | PK                   | SK                         | notes                                   |
|---------------------|----------------------|----------------------------|-----------------------------------------|
| connection          | CONN#{connectionId}  | META                       | ttl beyond the 2 h socket cap           |
| a socket's tools    | CONN#{connectionId}  | TOOLS                      | a WindieOS client's manifest; ttl       |
| node registry       | NODES                | {nodeId}                   | tools, runtime, connectionId; ttl       |
| known nodes         | NODECATALOG          | {nodeId}                   | kept after disconnect; `node.forget`    |
| client registry     | CLIENTS              | {clientId}                 | connectionId; ttl                       |
| channel socket      | CHANSOCKS            | {channel}:{accountId}      | connectionId; ttl                       |
| channel registry    | CHANNELS             | {channel}:{accountId}      | kept after disconnect                   |
| config overrides    | CONFIG               | OVERRIDES                  | one item, optimistic version `v`        |
| session meta        | SESSION#{sessionKey} | META                       |                                         |
| session message     | SESSION#{sessionKey} | MSG#{sessionId}#{seq:012d} | one item per message                    |
| session registry    | SESSIONREG           | {sessionKey}               | sessions.list                           |
| pending pair        | PAIRS                | {channel}:{senderId}       |                                         |
| heartbeat state     | HEARTBEAT            | {agentId}                  | optimistic version `v`                  |
| last active context | LASTACTIVE           | {agentId}                  |                                         |
| cron job            | CRON                 | JOB#{jobId}                | GSI1: CRONDUE / {nextRunAtMs:015d}#{id} |
| cron run            | CRONRUN#{jobId}      | {ts:015d}#{seq}            |                                         |
| gateway flags       | GATEWAY              | {flag}                     | e.g. workspace seeded                   |
| token usage         | USAGE                | {YYYY-MM}                  | UTC month: `m`, days `d01`..`d31`; ttl  |
| spend counter       | SPEND#{period}#{key} | {scope}                    | micro-USD `u` used, `r` reserved; ttl   |
| install identity    | INSTALLS             | {sha256 of the token}      | user_id, install_id (WindieOS installs) |
| device token        | DEVICES              | {tokenId}                  | keyed hash of the secret, role, binding |
| a device's sockets  | DEVSOCK#{tokenId}    | {connectionId}             | closed when the token is revoked; ttl   |
| device pairing code | DEVICEPAIRS          | {code}                     | role, binding; single use; ttl          |
| WindieOS settings   | WINDIESETTINGS       | {userId}                   | one user's client settings              |
| approval prompt     | APPROVALPROMPT#{id}  | {channel}                  | a prompt's chat and message id; ttl     |
| MCP tool list       | MCPTOOLS             | {server}                   | a remote MCP server's tools, status     |
"""

from __future__ import annotations

GSI1 = "GSI1"

# --- connections and registries -------------------------------------------------------------------------------


def connection(connection_id: str) -> tuple[str, str]:
    return f"{_CONNECTION_PREFIX}{connection_id}", "META"


def connection_tools(connection_id: str) -> tuple[str, str]:
    """The tools a client socket declared for its own runs (WindieOS's client manifest)."""
    return f"{_CONNECTION_PREFIX}{connection_id}", "TOOLS"


NODES_PK = "NODES"
NODE_CATALOG_PK = "NODECATALOG"
CLIENTS_PK = "CLIENTS"
CHANNEL_SOCKETS_PK = "CHANSOCKS"
CHANNELS_PK = "CHANNELS"
_CONNECTION_PREFIX = "CONN#"
_CALL_PREFIX = "CALL#"
_WAIT_GROUP_PREFIX = "WAITGROUP#"
_CALL_DUE_PREFIX = "CALLDUE#"
_HTTP_ANSWER_PREFIX = "HTTPANSWER#"
_DEVICE_SOCKET_PREFIX = "DEVSOCK#"
_PROCESS_BOUND_PREFIXES = (
    _CONNECTION_PREFIX,
    _DEVICE_SOCKET_PREFIX,
    _CALL_PREFIX,
    _CALL_DUE_PREFIX,
    _WAIT_GROUP_PREFIX,
    _HTTP_ANSWER_PREFIX,
)


def process_bound(pk: str, sk: str) -> bool:
    """Items that matter only while the process that wrote them runs: a socket's connection record, the registries
    of connected clients, nodes and channel sockets (not the channel registry, nor the keys a client used, which
    outlive them), the pending calls and wait groups of deferred calls (their callers are sockets and runs), and
    the answers HTTP requests wait for (the request ends with the process). A restart of the local gateway closes
    the sockets it finds and ends the runs, so its table writes these without waiting for the disk."""
    if pk == CLIENTS_PK:
        return not sk.startswith(CLIENT_ALIAS_PREFIX)
    return pk.startswith(_PROCESS_BOUND_PREFIXES) or pk in (NODES_PK, CHANNEL_SOCKETS_PK)


def node(node_id: str) -> tuple[str, str]:
    return NODES_PK, node_id


def node_catalog(node_id: str) -> tuple[str, str]:
    """A node the gateway has seen, connected or not (until `node.forget`)."""
    return NODE_CATALOG_PK, node_id


def client(client_id: str) -> tuple[str, str]:
    return CLIENTS_PK, client_id


def channel_key(channel: str, account_id: str) -> str:
    return f"{channel}:{account_id}"


def channel_socket(channel: str, account_id: str) -> tuple[str, str]:
    return CHANNEL_SOCKETS_PK, channel_key(channel, account_id)


def channel_entry(channel: str, account_id: str) -> tuple[str, str]:
    return CHANNELS_PK, channel_key(channel, account_id)


# --- config -------------------------------------------------------------------------------------------------

CONFIG = ("CONFIG", "OVERRIDES")

# --- sessions -----------------------------------------------------------------------------------------------

SESSION_REGISTRY_PK = "SESSIONREG"


def session_pk(session_key: str) -> str:
    return f"SESSION#{session_key}"


def session_meta(session_key: str) -> tuple[str, str]:
    return session_pk(session_key), "META"


def message_prefix(session_id: str) -> str:
    return f"MSG#{session_id}#"


MESSAGE_SEQ_MAX = 10**12 - 1
"""The largest message sequence number (twelve digits in the sort key)."""


def message(session_key: str, session_id: str, seq: int) -> tuple[str, str]:
    return session_pk(session_key), f"{message_prefix(session_id)}{seq:012d}"


def messages_from(session_key: str, session_id: str, seq: int) -> tuple[str, str]:
    """The sort-key bounds (inclusive) of a session's messages from sequence number `seq` on."""
    return message(session_key, session_id, seq)[1], message(session_key, session_id, MESSAGE_SEQ_MAX)[1]


def message_seq(sk: str) -> int:
    """The sequence number in a message's sort key."""
    return int(sk.rsplit("#", 1)[1])


def session_registry(session_key: str) -> tuple[str, str]:
    return SESSION_REGISTRY_PK, session_key


# --- pairing, heartbeat, cron ----------------------------------------------------------------------------------

PAIRS_PK = "PAIRS"
HEARTBEAT_PK = "HEARTBEAT"
LAST_ACTIVE_PK = "LASTACTIVE"
CRON_PK = "CRON"
CRON_DUE_GSI_PK = "CRONDUE"
CRON_JOB_PREFIX = "JOB#"


def pair(channel: str, sender_id: str) -> tuple[str, str]:
    return PAIRS_PK, f"{channel}:{sender_id}"


def heartbeat(agent_id: str) -> tuple[str, str]:
    return HEARTBEAT_PK, agent_id


def last_active(agent_id: str) -> tuple[str, str]:
    return LAST_ACTIVE_PK, agent_id


def cron_job(job_id: str) -> tuple[str, str]:
    return CRON_PK, f"{CRON_JOB_PREFIX}{job_id}"


def cron_due(next_run_at_ms: int, job_id: str) -> tuple[str, str]:
    return CRON_DUE_GSI_PK, f"{next_run_at_ms:015d}#{job_id}"


def cron_due_until(now_ms: int) -> str:
    """The greatest index sort key of a job due at `now_ms` (`cron_due` sorts by next run time, then id)."""
    return f"{max(0, now_ms):015d}#\uffff"


def cron_runs_pk(job_id: str) -> str:
    return f"CRONRUN#{job_id}"


GATEWAY_PK = "GATEWAY"


def gateway_flag(flag: str) -> tuple[str, str]:
    return GATEWAY_PK, flag


# --- token budgets: the gateway's usage per UTC month, with one counter for the month and one per day ----------

INSTALLS_PK = "INSTALLS"


def install(token_hash: str) -> tuple[str, str]:
    return INSTALLS_PK, token_hash


DEVICES_PK = "DEVICES"
DEVICE_PAIRS_PK = "DEVICEPAIRS"


def device(token_id: str) -> tuple[str, str]:
    """A device token's record (its keyed hash, never the token), read with one point read at every use."""
    return DEVICES_PK, token_id


def device_sockets_pk(token_id: str) -> str:
    """The sockets opened with a device token, so revoking it can close them."""
    return f"{_DEVICE_SOCKET_PREFIX}{token_id}"


def device_socket(token_id: str, connection_id: str) -> tuple[str, str]:
    return device_sockets_pk(token_id), connection_id


def device_pair(code: str) -> tuple[str, str]:
    """A one-time pairing code, exchanged (deleted) once for a device token."""
    return DEVICE_PAIRS_PK, code


UPLOAD_QUOTA_PK = "UPLOADQUOTA"


def upload_quota(install_id: str, day: str) -> tuple[str, str]:
    """What one WindieOS install uploaded on one UTC day (`YYYY-MM-DD`): counters `count` and `bytes`."""
    return UPLOAD_QUOTA_PK, f"{install_id}#{day}"


WINDIE_SETTINGS_PK = "WINDIESETTINGS"


def windie_settings(user_id: str) -> tuple[str, str]:
    """A WindieOS user's settings (model choice, voice and automation flags; never a provider key)."""
    return WINDIE_SETTINGS_PK, user_id


TOKEN_USAGE_PK = "USAGE"


def token_usage(month: str) -> tuple[str, str]:
    """The usage counters of a UTC month ("2025-01"): attribute `m` for the month, `d01`..`d31` for its days."""
    return TOKEN_USAGE_PK, month


SPEND_PREFIX = "SPEND#"


def spend_counter(period: str, period_key: str, scope: str) -> tuple[str, str]:
    """A spend counter (ADR 0044): one scope ("global", "agent:{id}", "session:{key}", "cron:{jobId}") in one period
    ("daily" "2025-01-31", "monthly" "2025-01", "session" {sessionId})."""
    return f"{SPEND_PREFIX}{period}#{period_key}", scope


def spend_period(period: str, period_key: str) -> str:
    """The partition of every spend counter of one period (the top sessions and jobs of a day are queried there)."""
    return f"{SPEND_PREFIX}{period}#{period_key}"


# --- S3 ------------------------------------------------------------------------------------------------------


def agent_root(agent_id: str) -> str:
    return f"agents/{agent_id}"


def workspace_object(agent_id: str, relative_path: str) -> str:
    root = agent_root(agent_id)
    return f"{root}/{relative_path}" if relative_path else root


def global_skills_root() -> str:
    return "skills"


def session_archive(agent_id: str, session_id: str) -> str:
    return f"{agent_root(agent_id)}/sessions/{session_id}.jsonl.gz"


def session_archive_part(agent_id: str, session_id: str, ts_ms: int) -> str:
    return f"{agent_root(agent_id)}/sessions/{session_id}-part{ts_ms}.jsonl.gz"


def session_media_prefix(session_key: str) -> str:
    return f"media/{session_key}/"


# --- cron run history (one item per run; GSI1 lists every job's runs by time) ---------------------------------

CRON_RUNS_GSI_PK = "CRONRUNS"


def cron_run(job_id: str, ts_ms: int, run_id: int) -> tuple[str, str]:
    return cron_runs_pk(job_id), f"{max(0, ts_ms):015d}#{run_id:012d}"


def cron_run_index(ts_ms: int, run_id: int) -> tuple[str, str]:
    return CRON_RUNS_GSI_PK, f"{max(0, ts_ms):015d}#{run_id:012d}"


CRON_RUN_SEQ_FLAG = "cron-run-seq"


# --- deferred calls, probes, exec events, transfers ----------------------------------------------------------------
#
# | pending call        | CALL#{callId}              | META                        | GSI1: NODECALLS#{nodeId} / callId |
# | call due            | CALLDUE#{epochSecond}      | {callId}                    | the timer of that second; ttl     |
# | probe               | PROBES#{nodeId}            | {probeId}                   |                                   |
# | async exec session  | EXECSESSION#{nodeId}       | {sessionId}                 | ttl 24 h                          |
# | exec event          | EXECEVENT#{nodeId}         | {sessionId}#{eventId}       | ttl 24 h                          |
# | transfer            | TRANSFERS                  | {transferId:010d}           | active transfers                  |
# | counter             | COUNTER                    | {name}                      | atomic ADD                        |
# | HTTP call's answer  | HTTPANSWER#{waiterId}      | RES                         | the res frame; ttl 1 h            |


def pending_call(call_id: str) -> tuple[str, str]:
    return f"{_CALL_PREFIX}{call_id}", "META"


def call_due(second: int, call_id: str) -> tuple[str, str]:
    """A pending call answered as timed out by the timer of `second` (epoch seconds) if still pending then."""
    return call_due_pk(second), call_id


def call_due_pk(second: int) -> str:
    return f"{_CALL_DUE_PREFIX}{second}"


def http_answer(waiter_id: str) -> tuple[str, str]:
    """The answer of a deferred call made over HTTP, which the request polls for (`store.http_answers`)."""
    return f"{_HTTP_ANSWER_PREFIX}{waiter_id}", "RES"


def node_calls_index(node_id: str, call_id: str) -> tuple[str, str]:
    return f"NODECALLS#{node_id}", call_id


def node_calls_pk(node_id: str) -> str:
    return f"NODECALLS#{node_id}"


def probes_pk(node_id: str) -> str:
    return f"PROBES#{node_id}"


def probe(node_id: str, probe_id: str) -> tuple[str, str]:
    return probes_pk(node_id), probe_id


def exec_session(node_id: str, session_id: str) -> tuple[str, str]:
    return f"EXECSESSION#{node_id}", session_id


def exec_event(node_id: str, session_id: str, event_id: str) -> tuple[str, str]:
    return f"EXECEVENT#{node_id}", f"{session_id}#{event_id}"


def exec_events_pk(node_id: str) -> str:
    return f"EXECEVENT#{node_id}"


TRANSFERS_PK = "TRANSFERS"


def transfer(transfer_id: int) -> tuple[str, str]:
    return TRANSFERS_PK, f"{transfer_id:010d}"


COUNTER_PK = "COUNTER"


def counter(name: str) -> tuple[str, str]:
    return COUNTER_PK, name


def transfer_staging(transfer_id: int) -> str:
    return f"transfers/{transfer_id}/object"


def transfer_part(transfer_id: int, offset: int) -> str:
    return f"transfers/{transfer_id}/parts/{offset:016d}"


def transfer_parts_prefix(transfer_id: int) -> str:
    return f"transfers/{transfer_id}/parts/"


# --- workspace listing prefixes and global skills (workspace RPCs and tools) ----------------------------------------


def workspace_prefix(agent_id: str, relative_dir: str) -> str:
    """The S3 prefix listing one directory of an agent's workspace (`agents/{id}/` for the root)."""
    return f"{workspace_object(agent_id, relative_dir)}/"


def global_skill_object(relative_path: str) -> str:
    """`skills/{relative_path}`: the global copy behind a virtual `skills/...` path (`skills` for the root)."""
    root = global_skills_root()
    return f"{root}/{relative_path}" if relative_path else root


def global_skills_prefix(relative_dir: str) -> str:
    """The S3 prefix listing one directory of the global skills tree (`skills/` for the root)."""
    return f"{global_skill_object(relative_dir)}/"


def workspace_seeded_flag(agent_id: str) -> tuple[str, str]:
    """Marks that an agent's workspace received its starter files."""
    return gateway_flag(f"seeded:{agent_id}")


# --- skill probes: which node a probe belongs to (the probe itself stays at PROBES#{nodeId} / {probeId}) -----------
#
# | probe owner         | PROBEOWNER#{probeId}       | META                        | nodeId; ttl                       |


def probe_owner(probe_id: str) -> tuple[str, str]:
    return f"PROBEOWNER#{probe_id}", "META"


# --- agent runs ------------------------------------------------------------------------------------------------------
#
# | queued input        | SESSION#{sessionKey}       | INPUT#{inputId}             | large run inputs; ttl 7 days      |
# | key alias           | CLIENTS                    | ~alias~{clientId}~{key}     | the key a client used (F2); ttl   |
# | wait group          | WAITGROUP#{groupId}        | META                        | outstanding count n, token tok    |
#
# S3: `runs/{execution}/…` large per-run data (tool plans), `media/{sessionKey}/…` session media (deleted on reset),
# `media/{sessionKey}/messages/{sessionId}/{seq}.json` bodies of messages too large for an item.

SESSION_INPUT_PREFIX = "INPUT#"
CLIENT_ALIAS_PREFIX = "~alias~"
"""Alias items share the client registry's partition, so one read of it yields sockets and the keys they use."""


def session_input(session_key: str, input_id: str) -> tuple[str, str]:
    return session_pk(session_key), f"{SESSION_INPUT_PREFIX}{input_id}"


def client_alias(client_id: str, session_key: str) -> tuple[str, str]:
    return CLIENTS_PK, f"{CLIENT_ALIAS_PREFIX}{client_id}~{session_key}"


RUN_SUBSCRIPTION_PREFIX = "~sub~"
"""A dialect socket's subscription to a run it started: beside the client sockets, so the one read of a session's
audience finds both."""


def run_subscription(run_id: str, connection_id: str) -> tuple[str, str]:
    return CLIENTS_PK, f"{RUN_SUBSCRIPTION_PREFIX}{run_id}~{connection_id}"


# --- tool approvals (`orbital.agent.approvals`) ------------------------------------------------------------------
#
# | approval         | APPROVAL#{approvalId} | META                            | st: pending or the decision       |
# |                  |                       |                                 | GSI1 while pending: APPROVALS /   |
# |                  |                       |                                 | {requestedAt:015d}#{approvalId}   |
# | approval history | SESSION#{sessionKey}  | APPROVAL#{decidedAt:015d}#{id}  | who decided what, when, whence    |

APPROVALS_GSI_PK = "APPROVALS"
APPROVAL_HISTORY_PREFIX = "APPROVAL#"
_APPROVAL_PREFIX = "APPROVAL#"


def approval(approval_id: str) -> tuple[str, str]:
    return f"{_APPROVAL_PREFIX}{approval_id}", "META"


def approvals_index(requested_at_ms: int, approval_id: str) -> tuple[str, str]:
    """Pending approvals, oldest first (the item leaves the index when decided)."""
    return APPROVALS_GSI_PK, f"{max(0, requested_at_ms):015d}#{approval_id}"


def approval_history(session_key: str, decided_at_ms: int, approval_id: str) -> tuple[str, str]:
    return session_pk(session_key), f"{APPROVAL_HISTORY_PREFIX}{max(0, decided_at_ms):015d}#{approval_id}"


def wait_group(group_id: str) -> tuple[str, str]:
    return f"{_WAIT_GROUP_PREFIX}{group_id}", "META"


def run_blob(execution: str, name: str) -> str:
    return f"runs/{execution}/{name}"


def media_object(name: str) -> str:
    """A media object served at `GET /media/{name}` (GSV's media route): uploaded artifacts live here."""
    return f"media/{name}"


def session_media(session_key: str, name: str) -> str:
    return f"{session_media_prefix(session_key)}{name}"


def message_body(session_key: str, session_id: str, seq: int) -> str:
    return session_media(session_key, f"messages/{session_id}/{seq:012d}.json")


def call_outcome_blob(call_id: str) -> str:
    return f"calls/{call_id}/outcome.json"


# --- cron runs in progress (task runs with a timeout), inbound messages seen ------------------------------------
#
# | inbound seen        | INBOUND#{channel}:{acct}   | {messageId}                 | ttl 48 h                          |
# | spend notice        | SPENDNOTICE#{sessionKey}   | {period}:{name}             | ttl: the period's end             |
# | active cron run     | CRONACTIVE#{jobId}         | {runId}                     | GSI1: CRONACTIVE / {deadline}#id |

CRON_ACTIVE_GSI_PK = "CRONACTIVE"


def cron_active_pk(job_id: str) -> str:
    return f"CRONACTIVE#{job_id}"


def cron_active(job_id: str, run_id: str) -> tuple[str, str]:
    return cron_active_pk(job_id), run_id


def cron_active_index(deadline_ms: int, job_id: str) -> tuple[str, str]:
    return CRON_ACTIVE_GSI_PK, f"{max(0, deadline_ms):015d}#{job_id}"


def inbound_seen(channel: str, account_id: str, message_id: str) -> tuple[str, str]:
    """Marks an inbound channel message as received (exactly-once processing of repeated deliveries)."""
    return f"INBOUND#{channel}:{account_id}", message_id


def spend_notice(session_key: str, period: str) -> tuple[str, str]:
    """A channel conversation was told that a spend limit refuses it in `period` (`daily:2026-11-28`, ...): it is
    not told again before the period ends (the item's ttl)."""
    return f"{_SPEND_NOTICE_PREFIX}{session_key}", period


def approval_prompt(approval_id: str, channel: str) -> tuple[str, str]:
    """Where a tool approval's prompt was posted on a messenger (chat and message id), so the message can show the
    decision once it is made (`orbital.channels.approval_prompt`)."""
    return f"{_APPROVAL_PROMPT_PREFIX}{approval_id}", channel


_APPROVAL_PROMPT_PREFIX = "APPROVALPROMPT#"
_SPEND_NOTICE_PREFIX = "SPENDNOTICE#"


# --- what a key is: the kind of an item or object, told from its key (export and import, store/portable.py) ---------
#
# Every item and object kind above has a name here; a key this layout does not know is of kind "other".

_PK_KINDS = {
    NODES_PK: "node",
    CHANNEL_SOCKETS_PK: "channel-socket",
    CHANNELS_PK: "channel",
    CONFIG[0]: "config",
    SESSION_REGISTRY_PK: "session-registry",
    PAIRS_PK: "pair",
    HEARTBEAT_PK: "heartbeat",
    LAST_ACTIVE_PK: "last-active",
    CRON_PK: "cron-job",
    TRANSFERS_PK: "transfer",
    COUNTER_PK: "counter",
    TOKEN_USAGE_PK: "token-usage",
    INSTALLS_PK: "install",
    DEVICES_PK: "device-token",
    DEVICE_PAIRS_PK: "device-pair",
    UPLOAD_QUOTA_PK: "upload-quota",
    WINDIE_SETTINGS_PK: "windie-settings",
}
_PK_PREFIX_KINDS = (
    ("CONN#", "connection"),
    (_DEVICE_SOCKET_PREFIX, "device-socket"),
    ("CRONRUN#", "cron-run"),
    ("CRONACTIVE#", "cron-active"),
    (_CALL_PREFIX, "pending-call"),
    (_CALL_DUE_PREFIX, "call-due"),
    ("PROBES#", "probe"),
    ("PROBEOWNER#", "probe-owner"),
    ("EXECSESSION#", "exec-session"),
    ("EXECEVENT#", "exec-event"),
    (_WAIT_GROUP_PREFIX, "wait-group"),
    ("INBOUND#", "inbound-seen"),
    (_SPEND_NOTICE_PREFIX, "spend-notice"),
    (_APPROVAL_PROMPT_PREFIX, "approval-prompt"),
    (_APPROVAL_PREFIX, "approval"),
)
_SESSION_SK_KINDS = (
    ("META", "session"),
    ("MSG#", "message"),
    (SESSION_INPUT_PREFIX, "session-input"),
    (APPROVAL_HISTORY_PREFIX, "approval-history"),
)
_OBJECT_PREFIX_KINDS = (
    ("skills/", "skill"),
    ("media/", "media"),
    ("runs/", "run-data"),
    ("calls/", "call-outcome"),
    ("transfers/", "transfer"),
)


def item_kind(pk: str, sk: str) -> str:
    """The kind of the item at (`pk`, `sk`): `config`, `session`, `message`, `connection`, … (see the tables above)."""
    if pk == CLIENTS_PK:
        if sk.startswith(RUN_SUBSCRIPTION_PREFIX):
            return "run-subscription"
        return "client-alias" if sk.startswith(CLIENT_ALIAS_PREFIX) else "client"
    if pk == GATEWAY_PK:
        return "counter" if sk == CRON_RUN_SEQ_FLAG else "gateway-flag"
    if pk.startswith(session_pk("")):
        return next((kind for prefix, kind in _SESSION_SK_KINDS if sk.startswith(prefix)), "session-other")
    if pk in _PK_KINDS:
        return _PK_KINDS[pk]
    return next((kind for prefix, kind in _PK_PREFIX_KINDS if pk.startswith(prefix)), "other")


def object_kind(key: str) -> str:
    """The kind of the object at `key`: `workspace` and `session-archive` (under `agents/`), `skill`, `media`,
    `run-data`, `call-outcome`, `transfer`, or `other`."""
    root = agent_root("")
    if key.startswith(root):
        parts = key[len(root) :].split("/")
        archived = len(parts) == 3 and parts[1] == "sessions" and parts[2].endswith(".jsonl.gz")
        return "session-archive" if archived else "workspace"
    return next((kind for prefix, kind in _OBJECT_PREFIX_KINDS if key.startswith(prefix)), "other")


# --- MCP servers (ADR 0045): each remote server's tool list, shared by every process ---------------------------
#
# (in the table of the module docstring: MCPTOOLS / {server})

MCP_TOOLS_PK = "MCPTOOLS"


def mcp_tools(server: str) -> tuple[str, str]:
    """A remote MCP server's tool list as last read, and how reading it went (`orbital.store.mcp`)."""
    return MCP_TOOLS_PK, server


_PK_KINDS[MCP_TOOLS_PK] = "mcp-tools"

# --- MCP servers' logins (ADR 0045): OAuth grants and the logins under way -------------------------------------
#
# | MCP OAuth grant     | MCPAUTH                    | {server}                    | client registration, tokens  |
# | MCP login under way | MCPLOGIN                   | {state}                     | PKCE verifier; single use; ttl |

MCP_AUTH_PK = "MCPAUTH"
MCP_LOGIN_PK = "MCPLOGIN"


def mcp_auth(server: str) -> tuple[str, str]:
    """A remote MCP server's OAuth grant: the client registration the gateway uses with its authorization server,
    the endpoints found, and the tokens (secrets: never returned by a method, never logged)."""
    return MCP_AUTH_PK, server


def mcp_login(state: str) -> tuple[str, str]:
    """A login started by `mcp.login` and not yet finished: its PKCE verifier, found again by the `state` the
    authorization server sends back to the callback; used once, gone after 10 minutes."""
    return MCP_LOGIN_PK, state


_PK_KINDS[MCP_AUTH_PK] = "mcp-auth"
_PK_KINDS[MCP_LOGIN_PK] = "mcp-login"

# --- one agent's share of the table and the workspace (`orbital.store.agent_archive`) --------------------------------
#
# An agent owns: the sessions whose key starts with `agent:{id}:` (with their messages, inputs, approval history,
# registry entries, spend notices and media under `media/agent:{id}:…`), its workspace `agents/{id}/`, HEARTBEAT and
# LASTACTIVE `{id}`, its cron jobs (`agentId`) with their runs, the spend counters of scopes `agent:{id}`,
# `session:agent:{id}:…` and `cron:{jobId}` of its jobs, and the flag `seeded:{id}`.

SESSION_PK_PREFIX = session_pk("")
CRON_RUNS_PK_PREFIX = cron_runs_pk("")
SPEND_NOTICE_PREFIX = _SPEND_NOTICE_PREFIX


def agent_session_prefix(agent_id: str) -> str:
    """What every session key of agent `agent_id` starts with."""
    return f"agent:{agent_id}:"


def agent_workspace_root(agent_id: str) -> str:
    """The prefix of every object of the agent's workspace."""
    return f"{agent_root(agent_id)}/"


def agent_media_prefix(agent_id: str) -> str:
    """The prefix of the media of every session of the agent (`session_media_prefix` of its keys)."""
    return media_object(agent_session_prefix(agent_id))


def spend_scope_agent(agent_id: str) -> str:
    return f"agent:{agent_id}"


def spend_scope_session(session_key: str) -> str:
    return f"session:{session_key}"


def spend_scope_cron(job_id: str) -> str:
    return f"cron:{job_id}"

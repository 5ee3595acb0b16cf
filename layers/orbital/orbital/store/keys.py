"""Every DynamoDB key and S3 key the gateway builds. No key string is assembled anywhere else.

Single table: `PK`, `SK`, `GSI1PK`/`GSI1SK` (index `GSI1`), `ttl` (epoch seconds, DynamoDB TTL attribute).

| entity              | PK                         | SK                          | notes                                   |
|---------------------|----------------------------|-----------------------------|-----------------------------------------|
| connection          | CONN#{connectionId}        | META                        | ttl beyond the 2 h socket cap           |
| node registry       | NODES                      | {nodeId}                    | tools, runtime, connectionId; ttl       |
| client registry     | CLIENTS                    | {clientId}                  | connectionId; ttl                       |
| channel socket      | CHANSOCKS                  | {channel}:{accountId}       | connectionId; ttl                       |
| channel registry    | CHANNELS                   | {channel}:{accountId}       | kept after disconnect (GSI §12.5)       |
| config overrides    | CONFIG                     | OVERRIDES                   | one item, optimistic version `v`        |
| session meta        | SESSION#{sessionKey}       | META                        |                                         |
| session message     | SESSION#{sessionKey}       | MSG#{sessionId}#{seq:012d}  | one item per message                    |
| session registry    | SESSIONREG                 | {sessionKey}                | sessions.list                           |
| pending pair        | PAIRS                      | {channel}:{senderId}        |                                         |
| heartbeat state     | HEARTBEAT                  | {agentId}                   |                                         |
| last active context | LASTACTIVE                 | {agentId}                   |                                         |
| cron job            | CRON                       | JOB#{jobId}                 | GSI1: CRONDUE / {nextRunAtMs:015d}#{id} |
| cron run            | CRONRUN#{jobId}            | {ts:015d}#{seq}             |                                         |
| gateway flags       | GATEWAY                    | {flag}                      | e.g. workspace seeded                   |
"""

from __future__ import annotations

GSI1 = "GSI1"

# --- connections and registries -------------------------------------------------------------------------------


def connection(connection_id: str) -> tuple[str, str]:
    return f"CONN#{connection_id}", "META"


NODES_PK = "NODES"
CLIENTS_PK = "CLIENTS"
CHANNEL_SOCKETS_PK = "CHANSOCKS"
CHANNELS_PK = "CHANNELS"


def node(node_id: str) -> tuple[str, str]:
    return NODES_PK, node_id


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


def message(session_key: str, session_id: str, seq: int) -> tuple[str, str]:
    return session_pk(session_key), f"{message_prefix(session_id)}{seq:012d}"


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


def cron_runs_pk(job_id: str) -> str:
    return f"CRONRUN#{job_id}"


def gateway_flag(flag: str) -> tuple[str, str]:
    return "GATEWAY", flag


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

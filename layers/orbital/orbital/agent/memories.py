"""Memory extraction after a reset (spec §7.7): the archived conversation is read back, chunked, and the model is
asked for memories worth keeping, which are appended to `memory/{date}.md` (the date of the conversation's last
activity).

Extraction calls the model once per chunk, which can take longer than a request may: a reset (RPC, `/new`, an
automatic reset) archives synchronously and then starts a background job on the `agent_turn` state machine
(`{"job": "memories"}`), so no caller waits for it. A guest's session (`compaction.keeps_memories`) has none extracted.
"""

from __future__ import annotations

import gzip
import json
import logging
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from orbital.agent import compaction, context
from orbital.agent.providers import context_window, has_credentials
from orbital.domain import compaction as rules
from orbital.domain.session_keys import session_agent_id

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.agent.memories")


def _model_for(services: Services, session_key: str) -> tuple[dict[str, Any], dict[str, str]]:
    config = services.config.effective()
    meta = services.sessions.load_meta(session_key) or {}
    return config, context.effective_model(config, meta, {})


def wanted(services: Services, session_key: str) -> bool:
    config = services.config.effective()
    meta = services.sessions.load_meta(session_key) or {}
    if not compaction.keeps_memories(meta):
        return False
    model = context.effective_model(config, meta, {})
    rule_settings = rules.compaction_settings(config)
    return rule_settings.enabled and rule_settings.extract_memories and has_credentials(config, model["provider"])


def schedule(services: Services, session_key: str, reset_result: dict[str, Any]) -> bool:
    """Start extraction for a reset that archived messages (when configured). True if a job was started."""
    archive = reset_result.get("archivedTo")
    if not archive or not reset_result.get("archivedMessages"):
        return False
    arn = services.settings.agent_turn_arn
    if not arn:
        return False
    try:
        if not wanted(services, session_key):
            return False
        payload = {"job": "memories", "sessionKey": session_key, "archive": {"key": archive}}
        services.workflows.start(arn, f"memories-{uuid.uuid4().hex}", payload)
    except Exception:
        log.exception("could not start memory extraction for %s", session_key)
        return False
    return True


def extract(services: Services, session_key: str, archive: dict[str, Any]) -> dict[str, Any]:
    """The background job: read the archive, extract memories chunk by chunk, append them to the daily file."""
    key = archive.get("key")
    if not isinstance(key, str):
        return {"memories": 0}
    found = services.workspace.get(key)
    if found is None or not compaction.keeps_memories(services.sessions.load_meta(session_key)):
        return {"memories": 0}
    lines = gzip.decompress(found[0]).decode("utf-8").split("\n")
    messages = [json.loads(line) for line in lines if line.strip()]
    config, model = _model_for(services, session_key)
    window = context_window(config, model["provider"], model["id"])
    known = ""
    parts: list[str] = []
    for chunk in rules.extraction_chunks(messages, window):
        try:
            text = compaction.ask(
                services, config, model, rules.memories_prompt(rules.serialize_messages_for_summary(chunk), known)
            )
        except Exception as exc:  # one chunk failing does not lose the others
            log.warning("memory extraction of a chunk failed: %s", exc)
            continue
        found_memories = rules.parse_memories_reply(text)
        if found_memories:
            parts.append(found_memories)
            known = rules.join_memories(parts)
    memories = rules.join_memories(parts)
    stamps = [int(m["timestamp"]) for m in messages if isinstance(m.get("timestamp"), int | float)]
    when = datetime.fromtimestamp(max(stamps) / 1000, UTC) if stamps else datetime.now(UTC)
    compaction.append_daily_memories(services, session_agent_id(session_key), memories, when, "session reset")
    return {"memories": len(parts)}

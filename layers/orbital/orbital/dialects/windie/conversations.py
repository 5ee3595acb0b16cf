"""A conversation's agent, session and label; the screenshots a query names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.dialects import base
from orbital.dialects.detect import WINDIE
from orbital.dialects.windie.common import (
    _SLUG,
    MAX_SCREENSHOTS,
    log,
)
from orbital.dialects.windie.frames import _WindieSocket
from orbital.domain.session_keys import resolve_agent_by_specificity
from orbital.store import artifacts, keys

if TYPE_CHECKING:
    from orbital.ports.services import Services


def agent_of(config: dict[str, Any], user_id: str, conversation_ref: str) -> str:
    return resolve_agent_by_specificity(config, channel=WINDIE, account_id=user_id, peer_id=conversation_ref)


def session_key(config: dict[str, Any], user_id: str, conversation_ref: str) -> str:
    """The session of a conversation: `agent:{agentId}:windie:group:{h(user_id, conversation_ref)}`."""
    return base.conversation_key(agent_of(config, user_id, conversation_ref), WINDIE, user_id, conversation_ref)


def label(user_id: str, conversation_ref: str) -> str:
    return f"{WINDIE}:{user_id}:{conversation_ref}"


def _run_prefix(turn: str) -> str:
    return f"{_SLUG.sub('-', turn)[:100]}#"


def _image_entry(services: Services, artifact_id: Any, reader: str | None) -> dict[str, Any] | None:
    """An artifact as a run's image (a reference: the bytes stay where they are); None, with a warning, when it is
    missing, not an image or not the reader's."""
    if not isinstance(artifact_id, str):
        return None
    found = artifacts.head(services.workspace, artifact_id)
    if found is None or not found.readable_by(reader):
        log.warning("screenshot %s is not available; going on without it", artifact_id[:80])
        return None
    if not found.content_type.startswith("image/"):
        log.warning("artifact %s is not an image; going on without it", artifact_id[:80])
        return None
    return {"type": "image", "mimeType": found.content_type, "r2Key": keys.media_object(found.artifact_id)}


def _screenshots(services: Services, sock: _WindieSocket, payload: dict[str, Any]) -> list[dict[str, Any]]:
    wanted: list[Any] = []
    if payload.get("screenshot_ref") is not None:
        wanted.append(payload["screenshot_ref"])
    refs = payload.get("screenshot_refs")
    if isinstance(refs, list):
        wanted += refs
    media = []
    for artifact_id in dict.fromkeys(a for a in wanted[:MAX_SCREENSHOTS] if isinstance(a, str)):
        entry = _image_entry(services, artifact_id, sock.reader)
        if entry is not None:
            media.append(entry)
    return media

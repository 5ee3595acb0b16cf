"""The HTTP routes WindieOS's clients and SDKs call (dialects.md §3.6; the seed `windieos-api.md` for the shapes).

Who may call them (`rest.auth`): the gateway's own credential, or an install token (`wnd_install_…`), which names a
user. With an install token a caller sees only its own user's artifacts and previews; cross-user requests are
refused (403). Errors are `{"detail": …}`: 401 credential, 403 not this caller's, 404 missing, 409 conflict, 413 too
large, 422 invalid, 429 over an install's upload quota, 503 not configured or provider unavailable.

- `POST /api/install/register` `{operating_system}` → `{success, user_id, install_id, install_token}`. Off unless
  `windie.registration` is true (403 otherwise), and always with the gateway's own credential, so on a gateway with
  a token (every deployment) no stranger can register. `GET /api/install/me` → `{success, user_id, install_id}` of
  the calling install (404 for the gateway's own credential, which is no install).
- `POST /api/artifacts/` (multipart, field `file`) → `{artifact_id, content_type, size_bytes, sha256, url}`;
  `GET /api/artifacts/{id}`: the owner's (or the gateway's) only, else 404; the bytes locally, a 302 to a presigned
  S3 URL on AWS. An upload made with the gateway's credential is private (the xeno bridge's attachments): only that
  credential reads it. With the form field `public=true` it is GSV media instead, served to anyone at `GET
  /media/{id}` (`public_url`) until `expires_at` (epoch ms; `media.publicLinkDays`, 7 by default). An install's
  uploads are its user's, at most `windie.dailyUploads` files (200) and `windie.dailyUploadBytes` bytes (512 MiB)
  per UTC day: over either, 429 with `Retry-After`.
- `GET /api/sdk/{models,tool-schemas,tool-capabilities/{name},system-prompt}`, `POST /api/sdk/{prompt-preview,
  query-plan}`: what a `/ws` query by the same caller would be given, computed by the dialect's own functions
  (`dialects.windie.query_preview`, `config_snapshot`; the models of `list-models`): an install's previews are
  restricted as its socket is, the model is the user's choice from `update-settings`, and `agent_definition` is
  read (and refused, 422) as a handshake's is. `model_id`, `model_provider` and `interaction_mode: "chat"` (no
  tools) are the request's what-ifs.
- `POST /api/semantic/{summarize,title}`, `GET /api/semantic/health`: through the configured model
  (`agent.semantic`). `POST /api/embeddings/`, `GET /api/embeddings/health`: the `embeddings` provider
  (`agent.embeddings`). 503 while not configured.
- OCR (`/api/sdk/ocr/*`), vision (`/api/sdk/vision/*`), the runs API (`/api/runs/*`) and the transcription socket
  (`/ws/transcription`) have no provider here: 503 `… not configured` (the socket: an `error` message, then a close
  saying so), which is how WindieOS answers when one is absent.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import PurePosixPath, PureWindowsPath
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request, WebSocket
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from orbital.agent import client_tools, embeddings, model_catalog, semantic
from orbital.agent.budgets import BudgetExceededError
from orbital.agent.providers import ModelError
from orbital.dialects import windie as dialect
from orbital.domain import roles, sniff
from orbital.domain.capabilities import effective_role
from orbital.domain.compaction import estimate_context_tokens, estimate_text_tokens
from orbital.domain.config import as_dict
from orbital.domain.media_types import EXTENSIONS, base_type
from orbital.ports.services import Services
from orbital.rest.auth import Caller, any_with, gateway_with
from orbital.rest.core import INERT, public_link_ms
from orbital.rest.deps import ServicesDep
from orbital.runtime import credentials
from orbital.store import artifacts, installs, keys

log = logging.getLogger("orbital.rest.windie")

router = APIRouter()

AnyCaller = Annotated[Caller, Depends(any_with(roles.CHAT))]
"""An install, or a device whose role may chat (ADR 0042): these routes run models and keep artifacts."""
GatewayCaller = Annotated[Caller, Depends(gateway_with(roles.ADMIN))]
"""The gateway's own credential with the `admin` scope: registering an install hands out a credential."""

LOCAL_USER = "default_user"
"""WindieOS's user on a single-user backend; a caller with the gateway's credential who names no user is it."""
SDK_CONVERSATION = "sdk-preview"
MAX_TEXT_BYTES = 32 * 1024
MAX_CONVERSATIONS = 100
MAX_EMBED_CHARS = 8192
MAX_NAME_CHARS = 128
MAX_PREVIEW_MESSAGES = 500
SERVED_TYPES = frozenset(EXTENSIONS) - {"image/svg+xml"}
"""Media types an upload keeps; anything else (HTML, SVG: pages that could run script from the gateway's origin) is
stored as `application/octet-stream`."""
ARTIFACT_HEADERS = {"Cache-Control": "private, max-age=3600", **INERT}
DAILY_UPLOADS = 200
"""How many artifacts one install may upload per UTC day by default (`windie.dailyUploads`)."""
DAILY_UPLOAD_BYTES = 512 * 1024 * 1024
"""How many bytes one install may upload per UTC day by default (`windie.dailyUploadBytes`)."""

REGISTRATION_OFF = "Install registration is off on this gateway (set windie.registration to true to allow it)"
NOT_AN_INSTALL = "No install identity: this request carries the gateway's own credential, not an install token"
CROSS_USER = "user_id does not match the authenticated install"
ARTIFACT_MISSING = "Artifact not found"
OCR_OFF = "OCR not configured"
VISION_OFF = "Vision not configured"
RUNS_OFF = "Runs API not configured (WINDIE_RUNS_API_KEY is not set)"
TRANSCRIPTION_OFF = "Transcription not configured"
OCR_OPERATIONS = frozenset(
    {"run", "inspect", "find-text", "find-text-candidates", "resolve-text", "resolve-candidate", "overlay"}
)
VISION_OPERATIONS = frozenset({"locate", "locate-all", "describe", "overlay"})


def _utf8_at_most(value: str, limit: int = MAX_TEXT_BYTES) -> str:
    if len(value.encode("utf-8")) > limit:
        raise ValueError(f"at most {limit} bytes")
    return value


def _not_default_user(value: str | None) -> str | None:
    if value == LOCAL_USER:
        raise ValueError(f"user_id cannot be {LOCAL_USER}")
    return value


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class RegisterBody(_Body):
    operating_system: str = Field("", max_length=256)


class EmbeddingBody(_Body):
    text: str = Field(min_length=1, max_length=MAX_EMBED_CHARS)
    model_name: str = Field("default", max_length=MAX_NAME_CHARS)


class SummarizeBody(_Body):
    conversations: list[str] = Field(max_length=MAX_CONVERSATIONS)
    user_id: str = Field(min_length=1, max_length=MAX_NAME_CHARS)

    @field_validator("conversations")
    @classmethod
    def _each_bounded(cls, value: list[str]) -> list[str]:
        for index, text in enumerate(value):
            if len(text.encode("utf-8")) > MAX_TEXT_BYTES:
                raise ValueError(f"conversation {index} is over {MAX_TEXT_BYTES} bytes")
        return value

    check_user = field_validator("user_id")(_not_default_user)


class TitleBody(_Body):
    user_id: str | None = Field(None, max_length=MAX_NAME_CHARS)
    user_message: str
    assistant_message: str
    model_id: str | None = Field(None, max_length=MAX_NAME_CHARS)
    model_provider: str | None = Field(None, max_length=MAX_NAME_CHARS)

    check_sizes = field_validator("user_message", "assistant_message")(_utf8_at_most)
    check_user = field_validator("user_id")(_not_default_user)


class PreviewBody(_Body):
    user_id: str | None = Field(None, max_length=MAX_NAME_CHARS)
    model_id: str | None = Field(None, max_length=MAX_NAME_CHARS)
    model_provider: str | None = Field(None, max_length=MAX_NAME_CHARS)
    interaction_mode: Literal["agent", "chat"] | None = None
    include_tools: bool = True
    workspace_path: str | None = Field(None, max_length=4096)
    user_query_raw: str | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_PREVIEW_MESSAGES)
    agent_definition: dict[str, Any] | None = None

    @field_validator("user_query_raw")
    @classmethod
    def _query_bounded(cls, value: str | None) -> str | None:
        return value if value is None else _utf8_at_most(value)


class PlanBody(PreviewBody):
    conversation_ref: str | None = Field(None, max_length=256)


# --- install identities ------------------------------------------------------------------------------------------


@router.post(
    "/api/install/register",
    tags=["windie"],
    summary="Register a WindieOS install (off unless windie.registration; needs the gateway's credential)",
    responses={403: {"description": "Registration is off, or the caller holds an install token"}},
)
def install_register(body: RegisterBody, caller: GatewayCaller, services: ServicesDep) -> dict[str, Any]:
    if as_dict(services.config.effective().get("windie")).get("registration") is not True:
        raise HTTPException(403, REGISTRATION_OFF)
    try:
        key = credentials.gateway_token_for_installs(services)
    except credentials.TokenUnreadableError:
        raise HTTPException(503, "The gateway token could not be read; try again") from None
    install, token = installs.register(
        services.table, body.operating_system.strip(), now_ms=services.now_ms(), gateway_token=key
    )
    log.info("install %s registered for %s", install.install_id, install.user_id)
    return {"success": True, "user_id": install.user_id, "install_id": install.install_id, "install_token": token}


@router.get("/api/install/me", tags=["windie"], summary="The calling install's identity")
def install_me(caller: AnyCaller) -> dict[str, Any]:
    if caller.is_gateway:
        raise HTTPException(404, NOT_AN_INSTALL)
    return {"success": True, "user_id": caller.user_id, "install_id": caller.install_id}


def _user_of(caller: Caller, requested: str | None) -> str:
    """The user a request is about: an install's own (naming another is refused), else the one named."""
    if caller.user_id is not None:
        if requested and requested != caller.user_id:
            raise HTTPException(403, CROSS_USER)
        return caller.user_id
    return requested or LOCAL_USER


# --- artifacts ---------------------------------------------------------------------------------------------------


def _file_name(raw: str | None) -> str | None:
    """The last part of a client's file name (either kind of slash), at most 255 characters."""
    if not raw:
        return None
    name = PureWindowsPath(PurePosixPath(raw).name).name.strip()
    return name[:255] or None


def _kept_type(declared: str | None, head: bytes, filename: str | None) -> str:
    """The media type an upload is stored with: what the bytes show, else the declared one (or the name's) when it
    is one the media store serves, else `application/octet-stream`; never an image type for bytes that are no
    image (`sniff.checked_type`)."""
    checked = base_type(sniff.checked_type(base_type(declared) or None, head, filename))
    return checked if checked in SERVED_TYPES else sniff.OCTET_STREAM


@router.post(
    "/api/artifacts/",
    tags=["windie"],
    summary="Upload an artifact (multipart field `file`)",
    responses={413: {"description": "Over the artifact limit (on Lambda, over what an event carries)"}},
)
async def upload_artifact(request: Request, caller: AnyCaller, services: ServicesDep) -> dict[str, Any]:
    try:
        form = await request.form(max_files=1, max_fields=16)
    except StarletteHTTPException as exc:  # a malformed multipart body (the body limit is not one: it passes)
        raise HTTPException(422, f"Invalid multipart body: {exc.detail}") from None
    try:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise HTTPException(422, "Expected a multipart/form-data body with a file in the field `file`")
        size = upload.size if upload.size is not None else 0
        if size > artifacts.MAX_ARTIFACT_BYTES:
            raise HTTPException(413, f"Artifact too large (at most {artifacts.MAX_ARTIFACT_BYTES} bytes)")
        data = await upload.read()
        if len(data) > artifacts.MAX_ARTIFACT_BYTES:
            raise HTTPException(413, f"Artifact too large (at most {artifacts.MAX_ARTIFACT_BYTES} bytes)")
        if not data:
            raise HTTPException(422, "The file is empty")
        filename = _file_name(upload.filename)
        kind = _kept_type(upload.content_type, data[:64], filename)
        public = _asked_public(form.get("public"))
    finally:
        await form.close()
    base = str(request.base_url).rstrip("/")
    if caller.user_id is None:  # the gateway's credential: private unless asked, a public link expires
        owner = artifacts.GATEWAY_OWNER if public else artifacts.PRIVATE_OWNER
        expires = services.now_ms() + public_link_ms(services) if public else None
    else:
        if public:
            raise HTTPException(403, "Only the gateway's own credential may publish an artifact")
        owner, expires = caller.user_id, None
        await run_in_threadpool(_charge, services, caller, len(data))
    saved = await run_in_threadpool(
        artifacts.save, services.workspace, data, owner=owner, mime_type=kind, filename=filename, expires_at_ms=expires
    )
    answer: dict[str, Any] = {
        "artifact_id": saved.artifact_id,
        "content_type": saved.content_type,
        "size_bytes": saved.size_bytes,
        "sha256": saved.sha256,
        "url": f"{base}/api/artifacts/{saved.artifact_id}",
    }
    if public:
        answer["public_url"] = f"{base}/media/{saved.artifact_id}"
        answer["expires_at"] = expires
    return answer


def _asked_public(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() in ("1", "true", "yes")


def _quota(services: Services) -> tuple[int, int]:
    """An install's daily upload caps: `windie.dailyUploads` (count) and `windie.dailyUploadBytes`."""
    section = services.config.effective().get("windie")
    section = section if isinstance(section, dict) else {}
    return (
        _positive(section.get("dailyUploads"), DAILY_UPLOADS),
        _positive(section.get("dailyUploadBytes"), DAILY_UPLOAD_BYTES),
    )


def _positive(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _charge(services: Services, caller: Caller, size: int) -> None:
    max_count, max_bytes = _quota(services)
    try:
        artifacts.charge_upload(
            services.table,
            caller.install_id or str(caller.user_id),
            size,
            now_ms=services.now_ms(),
            max_count=max_count,
            max_bytes=max_bytes,
        )
    except artifacts.QuotaExceededError as exc:
        raise HTTPException(429, str(exc), headers={"Retry-After": str(exc.retry_after_s)}) from None


@router.get(
    "/api/artifacts/{artifact_id}",
    tags=["windie"],
    summary="An artifact's bytes (owner only); on AWS a redirect to a presigned S3 URL",
    response_class=Response,
    responses={
        200: {"description": "The artifact's bytes", "content": {"application/octet-stream": {}}},
        302: {"description": "On AWS: a presigned S3 URL (valid 15 minutes)"},
        404: {"description": "No such artifact, or another user's"},
    },
)
def get_artifact(artifact_id: str, caller: AnyCaller, services: ServicesDep) -> Response:
    info = artifacts.head(services.workspace, artifact_id)  # whose it is, before any byte is read
    if info is None or not info.readable_by(caller.user_id) or info.expired(services.now_ms()):
        raise HTTPException(404, ARTIFACT_MISSING)
    if services.capabilities.bounded_responses:
        url = services.workspace.presign_get(keys.media_object(artifact_id))
        return RedirectResponse(url, 302, headers={"Cache-Control": "no-store"})
    found = artifacts.load(services.workspace, artifact_id)
    if found is None:
        raise HTTPException(404, ARTIFACT_MISSING)
    data, info = found
    return Response(data, media_type=info.content_type, headers=ARTIFACT_HEADERS)


# --- SDK introspection -------------------------------------------------------------------------------------------

_SYSTEM_CONTEXT = re.compile(r"<system_context>.*?</system_context>", re.DOTALL)
_ACTIVE_WINDOW = re.compile(r"<active_window>(.*?)</active_window>", re.DOTALL)
_USER_QUERY = re.compile(r"<user_query>(.*?)</user_query>", re.DOTALL)

UserQ = Annotated[str | None, Query(max_length=MAX_NAME_CHARS)]
ModelQ = Annotated[str | None, Query(max_length=MAX_NAME_CHARS)]
ModeQ = Literal["agent", "chat"] | None


def _what_a_query_gets(
    services: Services,
    caller: Caller,
    user_id: str | None,
    *,
    conversation_ref: str | None = None,
    agent_definition: Any = None,
    model_id: str | None = None,
    model_provider: str | None = None,
    offered: bool = True,
    with_prompt: bool = True,
) -> dialect.QueryPreview:
    """What a `/ws` query by this caller (an install: restricted as its socket is) with this `agent_definition` in
    the handshake would be given, in the named conversation (else `sdk-preview`)."""
    user = _user_of(caller, user_id)
    try:
        policy, own = dialect.definition_tools(services, agent_definition, admin=caller.is_gateway)
    except ValueError as exc:
        raise HTTPException(422, f"Invalid agent_definition: {exc}") from None
    return dialect.query_preview(
        services,
        user_id=user,
        conversation_ref=conversation_ref or SDK_CONVERSATION,
        policy=policy,
        client_tool_defs=own,
        model_id=model_id,
        model_provider=model_provider,
        offered=offered,
        with_prompt=with_prompt,
    )


def function_object(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool as the SDK's flat function object: `{type: "function", name, description?, parameters}`, the function
    of `tool-schemas`' objects."""
    return {"type": "function", **client_tools.function_of(tool)}


def _capability(name: str, preview: dialect.QueryPreview) -> dict[str, Any] | None:
    """Where one of the caller's backend tools runs and, for a node's tool, the node's declared capabilities for
    it. None for a name the caller's runs cannot be offered."""
    tool = next((t for t in preview.backend if t.get("name") == name), None)
    if tool is None:
        return None
    info: dict[str, Any] = {
        "name": name,
        "description": str(tool.get("description") or ""),
        "execution_target": "backend",
        "source": "native",
        "capabilities": [],
    }
    for node in preview.nodes:
        prefix = f"{node.node_id}__"
        if name.startswith(prefix):
            declared = as_dict(as_dict(node.runtime).get("toolCapabilities")).get(name[len(prefix) :])
            info.update(
                execution_target="node",
                source="node",
                node_id=node.node_id,
                host_role=effective_role(node.runtime),  # a late GSV node declares none: its capabilities tell
                capabilities=[c for c in declared if isinstance(c, str)] if isinstance(declared, list) else [],
            )
            break
    return info


@router.get("/api/sdk/models", tags=["windie"], summary="The model catalog and the effective config snapshot")
def sdk_models(
    caller: AnyCaller,
    services: ServicesDep,
    user_id: UserQ = None,
    model_id: ModelQ = None,
    model_provider: ModelQ = None,
    interaction_mode: ModeQ = None,
) -> dict[str, Any]:
    user = _user_of(caller, user_id)
    config = services.config.effective()
    meta = services.sessions.load_meta(dialect.session_key(config, user, SDK_CONVERSATION)) or {}
    model = dialect.query_model(config, meta, dialect.load_settings_item(services, user), model_id, model_provider)
    found = model_catalog.catalog(config)  # what `list-models` answers
    return {"config": dialect.config_snapshot(model, interaction_mode), "models": found["local"] + found["online"]}


@router.get("/api/sdk/tool-schemas", tags=["windie"], summary="Canonical and model-facing tool schemas")
def sdk_tool_schemas(
    caller: AnyCaller,
    services: ServicesDep,
    user_id: UserQ = None,
    model_id: ModelQ = None,
    model_provider: ModelQ = None,
    interaction_mode: ModeQ = None,
) -> dict[str, Any]:
    preview = _what_a_query_gets(
        services, caller, user_id, model_id=model_id, model_provider=model_provider, offered=interaction_mode != "chat"
    )
    return {
        "config": dialect.config_snapshot(preview.model, interaction_mode),
        "canonical_tool_schemas": [function_object(t) for t in preview.backend],
        "provider_tool_schemas": [function_object(t) for t in preview.tools],
    }


@router.get(
    "/api/sdk/tool-capabilities/{name}",
    tags=["windie"],
    summary="One tool's capability metadata and schemas",
    responses={404: {"description": "No tool of that name"}},
)
def sdk_tool_capabilities(
    name: str,
    caller: AnyCaller,
    services: ServicesDep,
    user_id: UserQ = None,
    model_id: ModelQ = None,
    model_provider: ModelQ = None,
    interaction_mode: ModeQ = None,
) -> dict[str, Any]:
    preview = _what_a_query_gets(
        services,
        caller,
        user_id,
        model_id=model_id,
        model_provider=model_provider,
        offered=interaction_mode != "chat",
        with_prompt=False,
    )
    found = _capability(name, preview)
    if found is None:
        raise HTTPException(404, f"Tool not found: {name[:MAX_NAME_CHARS]}")
    schema = function_object(next(t for t in preview.backend if t.get("name") == name))
    return {
        "config": dialect.config_snapshot(preview.model, interaction_mode),
        "capability": found,
        "canonical_tool_schema": schema,
        "provider_tool_schema": schema if any(t.get("name") == name for t in preview.tools) else None,
    }


@router.get("/api/sdk/system-prompt", tags=["windie"], summary="The system prompt a WindieOS query would get")
def sdk_system_prompt(
    caller: AnyCaller,
    services: ServicesDep,
    user_id: UserQ = None,
    model_id: ModelQ = None,
    model_provider: ModelQ = None,
    interaction_mode: ModeQ = None,
) -> dict[str, Any]:
    preview = _what_a_query_gets(
        services, caller, user_id, model_id=model_id, model_provider=model_provider, offered=interaction_mode != "chat"
    )
    return {"config": dialect.config_snapshot(preview.model, interaction_mode), "system_prompt": preview.system_prompt}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def prompt_messages(messages: list[dict[str, Any]], user_query_raw: str | None) -> list[dict[str, Any]]:
    """The request's messages as the model would see them (role and content), ending with the query when the
    messages do not already end with a user message."""
    shaped = [
        {"role": m["role"], "content": m.get("content") if isinstance(m.get("content"), str | list) else ""}
        for m in messages
        if isinstance(m, dict) and m.get("role") in ("user", "assistant", "system", "tool")
    ]
    if user_query_raw and (not shaped or shaped[-1]["role"] != "user"):
        shaped.append({"role": "user", "content": user_query_raw})
    return shaped


def user_message_full(messages: list[dict[str, Any]], user_query_raw: str | None) -> dict[str, Any] | None:
    """WindieOS's `user-message-full` transparency payload for the last user message: its content and what was
    injected around the query (`<system_context>`, the active window)."""
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    if last is None:
        return None
    content = _text_of(last.get("content"))
    injected = _SYSTEM_CONTEXT.search(content)
    window = _ACTIVE_WINDOW.search(content)
    query = _USER_QUERY.search(content)
    original = user_query_raw or (query.group(1).strip() if query else content)
    return {
        "content": content,
        "metadata": {
            "original_query": original,
            "context_type": "initial",
            "injected_context": injected.group(0) if injected else "",
            "active_window": window.group(1).strip() if window else "",
        },
    }


def _prompt_preview(
    services: Services, caller: Caller, body: PreviewBody, conversation_ref: str | None
) -> tuple[dict[str, Any], dialect.QueryPreview]:
    """The `prompt-preview` answer, and the preview it was made from."""
    preview = _what_a_query_gets(
        services,
        caller,
        body.user_id,
        conversation_ref=conversation_ref,
        agent_definition=body.agent_definition,
        model_id=body.model_id,
        model_provider=body.model_provider,
        offered=body.include_tools and body.interaction_mode != "chat",
    )
    shaped = prompt_messages(body.messages, body.user_query_raw)
    provider_schemas = [function_object(t) for t in preview.tools]
    count: int | None
    error: str | None = None
    try:
        count = estimate_text_tokens(preview.system_prompt) + estimate_context_tokens(shaped)
        count += estimate_text_tokens(json.dumps(provider_schemas, separators=(",", ":")))
    except Exception as exc:  # an estimate only: say why there is none
        count, error = None, f"token estimate failed: {type(exc).__name__}"
    answer = {
        "config": dialect.config_snapshot(preview.model, body.interaction_mode),
        "system_prompt": preview.system_prompt,
        "prompt_messages": shaped,
        "canonical_tool_schemas": [function_object(t) for t in preview.backend],
        "provider_tool_schemas": provider_schemas,
        "user_message_full": user_message_full(shaped, body.user_query_raw),
        "prompt_token_count": count,
        "token_count_error": error,
    }
    return answer, preview


@router.post("/api/sdk/prompt-preview", tags=["windie"], summary="What the model would be sent, without a run")
def sdk_prompt_preview(body: PreviewBody, caller: AnyCaller, services: ServicesDep) -> dict[str, Any]:
    return _prompt_preview(services, caller, body, None)[0]


@router.post("/api/sdk/query-plan", tags=["windie"], summary="A first turn's query message and transparency events")
def sdk_query_plan(body: PlanBody, caller: AnyCaller, services: ServicesDep) -> dict[str, Any]:
    """The preview, the `query` message a client would send, and the transparency events a first turn of that
    conversation posts before the model's stream (as the query posts them: same types, same payloads)."""
    result, preview = _prompt_preview(services, caller, body, body.conversation_ref)
    payload: dict[str, Any] = {"text": body.user_query_raw or ""}
    if body.conversation_ref:
        payload["conversation_ref"] = body.conversation_ref
    if body.workspace_path:
        payload["workspace_path"] = body.workspace_path
    events = [{"type": kind, "payload": event} for kind, event in preview.first_turn_events()]
    return {
        "config": result.pop("config"),
        "query_message": {"type": "query", "payload": payload},
        "transparency_events": events,
        **result,
    }


# --- semantic memory and embeddings ------------------------------------------------------------------------------


def _unavailable(exc: Exception) -> HTTPException:
    """503 for a model or provider that failed or refused (its message never carries a secret)."""
    if isinstance(exc, ModelError | BudgetExceededError):
        return HTTPException(503, exc.message)
    return HTTPException(503, str(exc))


@router.get("/api/semantic/health", tags=["windie"], summary="Whether summaries and titles can be made")
def semantic_health(caller: AnyCaller, services: ServicesDep) -> dict[str, str]:
    try:
        semantic.configured_model(services.config.effective())
    except semantic.SemanticNotConfiguredError as exc:
        raise HTTPException(503, str(exc)) from None
    return {"status": "healthy", "message": "Semantic summarization service ready"}


@router.post("/api/semantic/summarize", tags=["windie"], summary="Summarize conversations into semantic memory")
def semantic_summarize(body: SummarizeBody, caller: AnyCaller, services: ServicesDep) -> dict[str, Any]:
    _user_of(caller, body.user_id)
    try:
        summary, facts = semantic.summarize(
            services, services.config.effective(), body.conversations, time_limit_ms=_time_limit_ms(services)
        )
    except semantic.SemanticNotConfiguredError as exc:
        raise HTTPException(503, str(exc)) from None
    except semantic.TooSlowError as exc:
        raise HTTPException(504, str(exc)) from None
    except (ModelError, BudgetExceededError) as exc:
        raise _unavailable(exc) from None
    return {"summary": summary, "facts": facts, "success": True}


@router.post("/api/semantic/title", tags=["windie"], summary="A short title for a conversation's first exchange")
def semantic_title(body: TitleBody, caller: AnyCaller, services: ServicesDep) -> dict[str, Any]:
    _user_of(caller, body.user_id)
    try:
        title = semantic.title(
            services,
            services.config.effective(),
            body.user_message,
            body.assistant_message,
            time_limit_ms=_time_limit_ms(services),
        )
    except semantic.SemanticNotConfiguredError as exc:
        raise HTTPException(503, str(exc)) from None
    except semantic.TooSlowError as exc:
        raise HTTPException(504, str(exc)) from None
    except (ModelError, BudgetExceededError) as exc:
        raise _unavailable(exc) from None
    return {"title": title, "success": True}


def _time_limit_ms(services: Services) -> int | None:
    """How long a request's model calls may take in all: on AWS, within API Gateway's 29 s; locally unbounded but
    for each call's own timeout."""
    return semantic.AWS_CALL_MS if services.capabilities.bounded_requests else None


def _embedding_fields(provider: str, model: str, dimension: int | None, space: str) -> dict[str, Any]:
    return {
        "provider_id": provider,
        "model_id": model,
        "model_name": model,
        "dimension": dimension,
        "embedding_space_version": space,
    }


@router.get("/api/embeddings/health", tags=["windie"], summary="The embeddings provider, when one is configured")
def embeddings_health(caller: AnyCaller, services: ServicesDep) -> dict[str, Any]:
    try:
        chosen = embeddings.setup(services.config.effective())
    except embeddings.EmbeddingsNotConfiguredError as exc:
        raise HTTPException(503, str(exc)) from None
    fields = _embedding_fields(chosen.provider, chosen.model, chosen.expected_dimension(), chosen.space_version)
    return {"status": "healthy", **fields}


@router.post("/api/embeddings/", tags=["windie"], summary="An embedding of one text")
def embeddings_create(body: EmbeddingBody, caller: AnyCaller, services: ServicesDep) -> dict[str, Any]:
    try:
        limit = semantic.AWS_CALL_MS / 1000 if services.capabilities.bounded_requests else None
        found = embeddings.embed(services.config.effective(), body.text, max_timeout_s=limit, services=services)
    except BudgetExceededError as exc:  # a token budget or a spend cap (ADR 0044) refuses the call
        raise HTTPException(exc.code, exc.message) from None
    except embeddings.EmbeddingsNotConfiguredError as exc:
        raise HTTPException(503, str(exc)) from None
    except embeddings.EmbeddingsFailedError as exc:
        raise HTTPException(503, str(exc)) from None
    fields = _embedding_fields(found.provider, found.model, found.dimension, found.space_version)
    return {"embedding": found.vector, **fields}


# --- providers this gateway does not have ------------------------------------------------------------------------


@router.post(
    "/api/sdk/ocr/{operation}",
    tags=["windie"],
    summary="OCR (no provider configured: 503)",
    responses={503: {"description": "`OCR not configured`"}},
)
def sdk_ocr(operation: str, caller: AnyCaller) -> None:
    if operation not in OCR_OPERATIONS:
        raise HTTPException(404, "Not Found")
    raise HTTPException(503, OCR_OFF)


@router.post(
    "/api/sdk/vision/{operation}",
    tags=["windie"],
    summary="Vision grounding (no provider configured: 503)",
    responses={503: {"description": "`Vision not configured`"}},
)
def sdk_vision(operation: str, caller: AnyCaller) -> None:
    if operation not in VISION_OPERATIONS:
        raise HTTPException(404, "Not Found")
    raise HTTPException(503, VISION_OFF)


def runs(caller: AnyCaller, rest: str = "") -> None:
    """`rest`: the path below `/api/runs/` (any: nothing is served)."""
    raise HTTPException(503, RUNS_OFF)


for _method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
    router.add_api_route(
        "/api/runs/{rest:path}",
        runs,
        methods=[_method],
        operation_id=f"runs_{_method.lower()}",
        tags=["windie"],
        summary="The runs API (not offered: 503)",
        responses={503: {"description": "`Runs API not configured …`"}},
    )
    router.add_api_route("/api/runs", runs, methods=[_method], include_in_schema=False)


@router.websocket("/ws/transcription")
async def transcription(websocket: WebSocket) -> None:
    """Speech to text: no provider here. A caller without a credential is refused at the upgrade (403); any other
    gets an `error` message and a close whose reason says so."""
    try:
        await run_in_threadpool(any_with(roles.CHAT), websocket)
    except HTTPException:
        await websocket.close(code=1008, reason="Not authenticated")
        return
    await websocket.accept()
    await websocket.send_json({"type": "error", "message": TRANSCRIPTION_OFF})
    await websocket.close(code=1011, reason=TRANSCRIPTION_OFF)

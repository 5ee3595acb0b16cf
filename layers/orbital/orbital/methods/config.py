"""`config.get` / `config.set` (spec §9.3, fix F6: secrets masked on every read path)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.aws import secrets
from orbital.domain import config as cfg
from orbital.errors import RpcError
from orbital.protocol.params import Json
from orbital.protocol.registry import CLIENT, Params, Result, Router

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext

router = Router("config")


class ConfigGetParams(Params):
    path: str | None = None


class ConfigSetParams(Params):
    path: str | None = None
    value: Json = None


class ConfigGetResult(Result):
    path: str | None = None
    value: Any = None
    config: dict[str, Any] | None = None


class ConfigSetResult(Result):
    ok: bool
    path: str


@router.method("config.get", params=ConfigGetParams, result=ConfigGetResult, reads_only=True, modes=CLIENT)
def config_get(ctx: CallContext, params: ConfigGetParams) -> dict[str, Any]:
    """The effective configuration (defaults deep-merged with overrides), or one dotted path of it. Secrets are
    shown as "***" on every path."""
    if params.path:
        value = ctx.services.config.masked_get(params.path)
        if cfg.is_missing(value):
            return {"path": params.path}
        return {"path": params.path, "value": value}
    return {"config": ctx.services.config.masked()}


@router.method("config.set", params=ConfigSetParams, result=ConfigSetResult, modes=CLIENT)
def config_set(ctx: CallContext, params: ConfigSetParams) -> dict[str, Any]:
    """Store `value` at a dotted `path` of the overrides (a missing `value` deletes the key). Writing back the
    "***" mask where a secret is shown keeps the stored secret (and sets nothing where none is stored), also inside
    an object written whole."""
    path = (params.path or "").strip()
    if not path:
        raise RpcError("path required", code=400)
    if any(not seg for seg in path.split(".")):
        raise RpcError(f"Invalid config path: {path}", code=400)
    delete = "value" not in params.model_fields_set
    if not delete and _sets_auth_token(path, params.value) and secrets.token_configured(ctx.services.settings):
        raise RpcError(
            "auth.token is not used by this gateway: it has a gateway token of its own (--token / TOKEN locally, the "
            "deployment's gateway-token secret on AWS), which is the one credential; change that token instead",
            code=400,
        )
    ctx.services.config.set_path(path, params.value, delete=delete)
    return {"ok": True, "path": path}


def _sets_auth_token(path: str, value: Any) -> bool:
    """Whether writing `value` at `path` would store an `auth.token`."""
    if path == "auth.token":
        return True
    if path == "auth":
        return isinstance(value, dict) and value.get("token") not in (None, "")
    return False

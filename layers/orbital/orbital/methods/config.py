"""`config.get` / `config.set` (spec §9.3, fix F6: secrets masked on every read path).

Unlike GSV's, `config.set` checks what it stores against the schema (`orbital.domain.config_schema`, listed in
docs/configuration.md): a wrong type, a value out of range or a model of an unknown provider is refused with a 400
naming the path, what it expected and what it got (`details.problems`), and nothing is stored. A key the schema does
not know is stored as GSV stores any path, and the answer carries a `warning` naming the nearest known key.
`config.get` of a path that holds nothing answers `{path, exists: false}`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.aws import secrets
from orbital.domain import config as cfg
from orbital.domain import roles
from orbital.errors import BadRequestError, ForbiddenError, RpcError
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
    exists: bool | None = None
    """Only with a `path` that holds nothing: false (the value is then absent)."""
    config: dict[str, Any] | None = None


class ConfigSchemaResult(Result):
    fields: list[dict[str, Any]]
    """Every key the gateway reads, depth first (as docs/configuration.md lists them): `{path, type, kind,
    description, secret, default?, min?, max?, options?, pattern?}`; `kind` is int, number, bool, string, enum,
    list, object or any; `<name>` and `<n>` in a path stand for a name and a list position."""


class ConfigSetResult(Result):
    ok: bool
    path: str
    warning: str | None = None
    """Only when the path (or a key inside the value) is one this gateway does not read: which, and the nearest known
    key ("unknown key `modle` — did you mean `model`?"). The value is stored all the same."""


@router.method(
    "config.get", params=ConfigGetParams, result=ConfigGetResult, reads_only=True, modes=CLIENT, scope=roles.READ
)
def config_get(ctx: CallContext, params: ConfigGetParams) -> dict[str, Any]:
    """The effective configuration (defaults deep-merged with overrides), or one dotted path of it. Secrets are
    shown as "***" on every path. A path that holds nothing answers `{path, exists: false}` (GSV leaves `value`
    out; so does this)."""
    if params.path:
        value = ctx.services.config.masked_get(params.path)
        if cfg.is_missing(value):
            return {"path": params.path, "exists": False}
        return {"path": params.path, "value": value}
    return {"config": ctx.services.config.masked()}


@router.method(
    "config.schema", params=Params, result=ConfigSchemaResult, reads_only=True, modes=CLIENT, scope=roles.READ
)
def config_schema(ctx: CallContext, params: Params) -> dict[str, Any]:
    """The configuration's schema: each key's type, range, default and meaning (what `config.set` checks, and what
    the console's Settings fields are made of)."""
    # lazy: the schema's models take tens of ms to build; only config writes and model choices need them
    from orbital.domain import config_schema as schema

    return {"fields": [row.to_wire() for row in schema.reference_rows()]}


@router.method("config.set", params=ConfigSetParams, result=ConfigSetResult, modes=CLIENT, scope=roles.OPERATE)
def config_set(ctx: CallContext, params: ConfigSetParams) -> dict[str, Any]:
    """Store `value` at a dotted `path` of the overrides (a missing `value` deletes the key). Writing back the
    "***" mask where a secret is shown keeps the stored secret (and sets nothing where none is stored), also inside
    an object written whole. Setting or deleting a secret needs the `admin` scope (ADR 0042): an operator may write
    everything else, and the mask back. The configuration this makes is checked against the schema at, under and above
    `path`: a wrong type, a value out of range or a model of an unknown provider is a 400 naming the path, what it
    expected and what it got (`details.problems`: `[{path, expected, got}]`), and nothing is stored. A model may be
    given as `provider/model-id` (stored as `{provider, id}`). A key the schema does not know is stored, and the
    answer's `warning` says so."""
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
    # lazy: the schema's models take tens of ms to build; only config writes and model choices need them
    from orbital.domain import config_schema as schema

    value = schema.normalize(path, params.value)

    role = roles.role_of(ctx.conn.extra if ctx.conn is not None else None)
    before = None if roles.allows(role, roles.ADMIN) else secrets_in(ctx.services.config.effective(), [])

    def check(config: dict[str, Any]) -> None:
        if before is not None and secrets_in(config, []) != before:
            raise ForbiddenError(
                f"Setting or deleting a secret ({path}) needs scope {roles.ADMIN}; this device's role is {role} (it "
                f'may write the mask "{cfg.MASK}" back where a secret is shown, which keeps the stored secret)'
            )
        problems = schema.problems_at(config, path)
        if problems:
            raise BadRequestError(schema.refusal(problems), details={"problems": [p.to_wire() for p in problems]})

    ctx.services.config.set_path(path, value, delete=delete, check=check)
    result: dict[str, Any] = {"ok": True, "path": path}
    unknown = schema.unknown_keys(path, value, deleting=delete)
    if unknown:
        result["warning"] = "; ".join(unknown)
    return result


def secrets_in(value: Any, path: list[str]) -> dict[tuple[str, ...], Any]:
    """Every secret (`cfg.is_secret`) in `value`, found at `path`: its path -> its value."""
    if cfg.is_secret(path):
        return {tuple(path): value}
    found: dict[tuple[str, ...], Any] = {}
    if isinstance(value, dict):
        for key, item in value.items():
            found.update(secrets_in(item, [*path, str(key)]))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.update(secrets_in(item, [*path, str(index)]))
    return found


def _sets_auth_token(path: str, value: Any) -> bool:
    """Whether writing `value` at `path` would store an `auth.token`."""
    if path == "auth.token":
        return True
    if path == "auth":
        return isinstance(value, dict) and value.get("token") not in (None, "")
    return False

"""The typed admin API (ADR 0029): every method a client socket may call is also `POST /api/v1/{method}`, generated
from the one registry, never written route by route.

- Body: the method's params as JSON (its params model in the OpenAPI document); an empty body is `{}`. Response:
  the method's payload (its result model where it has one).
- Credential: the gateway's (`auth.gateway_only`): `Authorization: Bearer <gateway token>`, 401 without it, 403 for
  a WindieOS install token; nothing on a loopback gateway without a token. Judged before the body is read
  (`AuthFirst`): without the token a malformed or huge body is a 401 too.
- The call is a GSV request of a client socket: the same dispatcher, handlers, mode rules and errors. The socket is
  a record made for the request and never stored (`Connection`, mode client, its id a waiter id of
  `store.http_answers`), so a method cannot tell HTTP from a socket except that nothing is pushed to it.
- Errors: `{"detail": message, "code": gsv_code}` (plus `details` / `retryable` when the method gives them) with
  the HTTP status of `status_for(code)`: GSV's 4xx and 5xx codes as they are, its connection codes (1xx) 400,
  anything else 500. Invalid params are 400, as on the socket, with the same message.
- Deferred methods (a node's tool call, `logs.get`, a transfer, a socket channel's control call) answer later:
  the request waits for the answer, polling for it (`store.http_answers`), at most `WAIT_SECONDS` (less the margin
  on Lambda, whose invocation must end before API Gateway's 30 s), and then answers 504 saying so. The call itself
  goes on; its answer, when it comes, is dropped.
- `connect` (`MethodSpec.socket_only`) is not offered: it is a socket's handshake.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Body, Depends, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from orbital.domain import roles
from orbital.protocol.dispatch import Dispatcher
from orbital.protocol.jsontext import compact
from orbital.rest.auth import Caller, gateway_only
from orbital.rest.deps import ServicesDep
from orbital.rest.limits import MAX_RESPONSE_BYTES
from orbital.store import http_answers
from orbital.store.connections import Connection

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.protocol.registry import MethodSpec, Registry

log = logging.getLogger("orbital.rest")

PREFIX = "/api/v1"
WAIT_SECONDS = 25.0
"""The longest an HTTP request waits for a deferred method's answer (API Gateway's integration timeout is 30 s)."""
UNAUTHENTICATED = frozenset({PREFIX + "/pair/exchange"})
"""Routes under the prefix that are no method and take no bearer (`rest.auth.PUBLIC` says why)."""
BEARER_FIRST = frozenset({"/mcp"})
"""Routes outside the prefix whose bearer is judged before their body too (`rest.mcp_server`)."""
LAMBDA_MARGIN_SECONDS = 2.0
"""Kept free of the invocation's remaining time on Lambda, to answer the 504 before the function is stopped."""
FIRST_POLL_SECONDS = 0.02
LONGEST_POLL_SECONDS = 0.25


class ApiError(BaseModel):
    """An error of the admin API."""

    detail: str
    """What went wrong (the method's own message)."""
    code: int
    """The GSV error code (what a socket would get in `error.code`)."""
    details: Any = None
    retryable: bool | None = None


ERROR_REF = "#/components/schemas/ApiError"


def _error(description: str) -> dict[str, Any]:
    # a reference, not `model`: a model per status and route would cost ~80 ms when the app is built (the schema is
    # added to the document once, `with_error_schema`)
    return {"description": description, "content": {"application/json": {"schema": {"$ref": ERROR_REF}}}}


ERRORS: dict[int | str, dict[str, Any]] = {
    400: _error("Invalid params, or the method refused them"),
    401: _error("No gateway token, or a wrong one"),
    403: _error("Not allowed (a WindieOS install token, or the method's own rules)"),
    404: _error("Something the call names does not exist"),
    409: _error("Conflicts with the current state"),
    429: _error("A token budget is spent"),
    500: _error("The method failed (unexpected failures carry a reference id)"),
    503: _error("A node, channel or service the call needs is not available"),
    504: _error("A node or channel did not answer in time (its timeout, or the wait)"),
}


def with_error_schema(document: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI document with `ApiError` among its schemas (the admin routes' errors refer to it), and without the
    422 FastAPI lists for every route with a body: the admin API answers invalid params with 400."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("ApiError", ApiError.model_json_schema(ref_template="#/components/schemas/{model}"))
    for path, operations in document.get("paths", {}).items():
        if path.startswith(PREFIX + "/"):
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
    return document


_json = compact(ensure_ascii=False)
_GATEWAY = Depends(gateway_only)

FAMILY_TAGS = {"nodes": "tools"}
"""Tag of a family whose methods users know by another name."""


def status_for(code: int) -> int:
    """The HTTP status for a GSV error code."""
    if 400 <= code <= 599:
        return code
    if 100 <= code <= 199:  # connection and handshake codes: the request was not acceptable
        return 400
    return 500


def error_response(
    code: int,
    message: str,
    details: Any = None,
    retryable: bool | None = None,
    *,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """The one shape of an HTTP error, on every route: `{"detail": message, "code": code}`."""
    body: dict[str, Any] = {"detail": message, "code": code}
    if details is not None:
        body["details"] = details
    if retryable is not None:
        body["retryable"] = retryable
    return JSONResponse(body, status_for(code), headers=dict(headers) if headers else None)


def refusal(connection: HTTPConnection) -> JSONResponse | None:
    """The answer to an admin API request whose bearer does not let it call (401, 403, 503), before anything of
    its body is read; None when it may call."""
    try:
        gateway_only(connection)
    except HTTPException as exc:
        return error_response(exc.status_code, str(exc.detail), headers=exc.headers)
    return None


class AuthFirst:
    """ASGI middleware: an admin API request (`POST /api/v1/…`) is judged by its bearer before its body is read,
    measured or parsed, so a caller without the token learns nothing from a malformed or huge body (401, not
    400 or 413). The route's own dependency judges it again (and shows the scheme in the document)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        guarded = (path.startswith(PREFIX + "/") and path not in UNAUTHENTICATED) or path in BEARER_FIRST
        if scope["type"] == "http" and guarded:
            refused = await run_in_threadpool(refusal, HTTPConnection(scope))
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _wait_seconds(request: Request) -> float:
    context = request.scope.get("aws.context")
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if callable(remaining):
        return max(0.0, min(WAIT_SECONDS, remaining() / 1000 - LAMBDA_MARGIN_SECONDS))
    return WAIT_SECONDS


def _wait_for_answer(services: Services, waiter: str, seconds: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + seconds
    pause = FIRST_POLL_SECONDS
    while True:
        try:
            frame = http_answers.take(services.table, waiter)
        except Exception as exc:  # a passing failure of the table: the next poll tries again, within the bound
            log.warning("waiting for an HTTP call's answer: %s", type(exc).__name__)
            frame = None
        if frame is not None:
            return frame
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(pause, left))
        pause = min(pause * 1.5, LONGEST_POLL_SECONDS)


def call(
    services: Services,
    method: str,
    params: Any,
    wait_seconds: float,
    *,
    caller: Caller | None = None,
    internal: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Dispatch one call as a client socket of its own: the response frame (None: a deferred answer did not come
    within `wait_seconds`). The socket carries the caller's role (and device), so the dispatcher checks the method's
    scope as it does for a socket (ADR 0042). `internal`: what a route of the gateway's own passes beside the params
    (`CallContext.internal`; never from the request)."""
    waiter = http_answers.new_waiter()
    extra: dict[str, Any] = {"http": True}
    if caller is not None and caller.role != roles.DEFAULT_ROLE:
        extra["role"] = caller.role
    if caller is not None and caller.device_id:
        extra["deviceId"] = caller.device_id
    conn = Connection(waiter, "client", services.now_ms(), extra=extra)
    frame = {"type": "req", "id": waiter, "method": method, "params": params}
    outcome = Dispatcher(services.registry).dispatch(services, waiter, frame, conn=conn, internal=internal)
    outcome.run_after_reply()
    if outcome.response is not None:
        return outcome.response
    return _wait_for_answer(services, waiter, wait_seconds)


def _answer(method: str, response: dict[str, Any] | None, waited: float) -> Response:
    if response is None:
        return error_response(
            504,
            f"{method}: no answer within {waited:.0f} s, the longest an HTTP request waits; the call goes on and its "
            "answer will be dropped (use the WebSocket for longer calls)",
            retryable=False,
        )
    if not response.get("ok"):
        error = response.get("error") or {}
        return error_response(
            int(error.get("code") or 500),
            str(error.get("message") or "failed"),
            error.get("details"),
            error.get("retryable"),
        )
    payload = response.get("payload")
    text = _json(payload)
    if len(text) * 4 > MAX_RESPONSE_BYTES and len(text.encode("utf-8")) > MAX_RESPONSE_BYTES:
        size = len(text.encode("utf-8"))
        return error_response(
            413, f"{method}: the answer is too large for an HTTP response ({size} bytes); ask for less"
        )
    return Response(text, media_type="application/json")


def endpoint(spec: MethodSpec) -> Callable[..., Awaitable[Response]]:
    """The route function of one method: FastAPI validates the body against the params model (for the document and
    a 400 before anything runs); the dispatcher gets the JSON object as sent, as it would from a socket."""

    async def route(request: Request, **given: Any) -> Response:
        caller = given.get("caller")
        raw = await request.body()
        try:
            params = json.loads(raw) if raw.strip() else None
        except ValueError:  # FastAPI has refused it already; kept for any other way in
            return error_response(400, "Invalid params: the body is not JSON")
        seconds = _wait_seconds(request)
        services = given["services"]
        response = await run_in_threadpool(
            functools.partial(call, caller=caller if isinstance(caller, Caller) else None),
            services,
            spec.name,
            params,
            seconds,
        )
        return _answer(spec.name, response, seconds)

    route.__name__ = "call_" + spec.name.replace(".", "_")
    route.__doc__ = spec.summary
    route.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request),
            inspect.Parameter(
                "params", inspect.Parameter.KEYWORD_ONLY, annotation=spec.params | None, default=Body(None)
            ),
            inspect.Parameter("caller", inspect.Parameter.KEYWORD_ONLY, annotation=Caller, default=_GATEWAY),
            inspect.Parameter("services", inspect.Parameter.KEYWORD_ONLY, annotation=ServicesDep),
        ],
        return_annotation=Response,
    )
    return route


def _summary(spec: MethodSpec) -> str:
    first = " ".join(spec.summary.split()).split(". ")[0].rstrip(".")
    return first[:120] if first else spec.name


def _description(spec: MethodSpec) -> str:
    text = " ".join(spec.summary.split())
    if spec.deferred:
        text += f" The answer comes from a node: the request waits for it, at most {WAIT_SECONDS:.0f} s."
    return text


def router(registry: Registry) -> APIRouter:
    """`POST /api/v1/{method}` for every method of `registry.http_methods()`."""
    api = APIRouter(prefix=PREFIX)
    families = {name: family for family, names in registry.families().items() for name in names}
    for spec in registry.http_methods():
        family = families.get(spec.name, "gateway")
        api.add_api_route(
            f"/{spec.name}",
            endpoint(spec),
            methods=["POST"],
            name=spec.name,
            operation_id=spec.name,
            tags=[FAMILY_TAGS.get(family, family)],
            summary=_summary(spec),
            description=_description(spec),
            response_model=spec.result,
            responses=ERRORS,
        )

    async def not_offered(method: str, caller: Caller = _GATEWAY) -> Response:
        spec = registry.get(method)
        if spec is None:
            return error_response(404, f"Unknown method: {method}")
        if spec.socket_only:
            return error_response(404, f"{method} is only meaningful on a WebSocket")
        modes = " and ".join(sorted(spec.modes))
        return error_response(404, f"{method} is not offered over HTTP: only {modes} sockets may call it")

    api.add_api_route("/{method}", not_offered, methods=["POST"], include_in_schema=False)
    return api


async def invalid_params(request: Request, exc: RequestValidationError) -> Response:
    """A body the params model refuses: 400 with the message a socket would get."""
    method = request.url.path.removeprefix(PREFIX + "/")
    errors = list(exc.errors())
    if any(tuple(err.get("loc", ())) == ("body",) for err in errors):  # not an object at all
        kind = request.headers.get("content-type", "")
        if kind and "json" not in kind.lower():  # e.g. curl -d without a Content-Type header sends a form
            return error_response(
                400, f"Invalid params: expected a JSON object (Content-Type: application/json, not {kind[:60]})"
            )
        return error_response(400, "Invalid params: expected an object")
    return error_response(400, f"Invalid params for {method}: {describe_errors(errors)}")


def describe_errors(errors: Sequence[Any]) -> str:
    """Validation errors as one line: `where: what; …` (the first five)."""
    parts = []
    for err in list(errors)[:5]:
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        parts.append(f"{'.'.join(loc) or 'params'}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid"

"""The local gateway's Step Functions and management API calls answered without botocore's round trip.

The gateway's own Step Functions client and management API client are served in process
(`orbital.local.inprocess`); for their hottest operations a `DirectClient` skips botocore's request building,
signing and response parsing as well, and hands the call's parameters (boto3's parameters are the wire shapes)
straight to what answers them, returning the dict boto3 would have returned:

- Step Functions: StartExecution, SendTaskSuccess, SendTaskFailure (to the Step Functions process,
  `orbital.local.sfn_worker`, or moto's handler in this process when the state machines are interpreted here);
- the management API: PostToConnection (the bridge's own handler).

Errors are raised as the client's own modeled exceptions (`client.exceptions.GoneException`, …). Every other
operation, and any call once the gateway has stopped, goes through the wrapped boto3 client unchanged. Calls are
counted like the factory's (`orbital.aws.clients.count`).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orbital.aws import clients
from orbital.local.bridge import BridgeUnavailableError
from orbital.local.sfn_worker import CALL_TIMEOUT, LOOP_CALL_TIMEOUT, WorkerGoneError, WorkerRefusedError

if TYPE_CHECKING:
    from botocore.client import BaseClient

    from orbital.local.inprocess import InProcessAws

log = logging.getLogger("orbital.local")

STEPFUNCTIONS_OPERATIONS = {
    "start_execution": "StartExecution",
    "send_task_success": "SendTaskSuccess",
    "send_task_failure": "SendTaskFailure",
}


class DirectClient:
    """A boto3 client whose listed operations are answered directly; everything else is the wrapped client's."""

    def __init__(self, wrapped: BaseClient, operations: dict[str, tuple[str, Callable[[dict[str, Any]], Any]]]):
        self._wrapped = wrapped
        self._service = wrapped.meta.service_model.service_id.hyphenize()
        for method, (operation, serve) in operations.items():
            setattr(self, method, self._operation(method, operation, serve))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)

    def _operation(
        self, method: str, operation: str, serve: Callable[[dict[str, Any]], Any]
    ) -> Callable[..., dict[str, Any]]:
        fallback = getattr(self._wrapped, method)

        def call(**params: Any) -> dict[str, Any]:
            try:
                result = serve(params)
            except _UnservedError:
                return fallback(**params)
            except Exception as exc:
                raise self._client_error(exc, operation) from exc
            clients.count(self._service, operation)
            answer = dict(result) if isinstance(result, dict) else {}
            answer["ResponseMetadata"] = {"HTTPStatusCode": 200, "HTTPHeaders": {}, "RetryAttempts": 0}
            return answer

        call.__name__ = method
        return call

    def _client_error(self, exc: Exception, operation: str) -> Exception:
        """moto's exception as the one botocore would have raised for the same error response."""
        from botocore.exceptions import ClientError

        if isinstance(exc, ClientError):
            return exc
        code, message, status = error_answer(exc, f"{self._service}.{operation}")
        clients.count(self._service, operation)
        response: Any = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}
        error_class: type[Exception] = self._wrapped.exceptions.from_code(code)
        return error_class(response, operation)


class _UnservedError(Exception):
    """This call is not answered directly (the gateway stopped, or the bridge is not reachable): boto3 serves it."""


def error_answer(exc: BaseException, what: str = "") -> tuple[str, str, int]:
    """The AWS error (code, message, HTTP status) that moto's exception, or another answer's refusal, stands for."""
    from moto.core.exceptions import ServiceException
    from werkzeug.exceptions import HTTPException

    if isinstance(exc, WorkerRefusedError):
        return exc.error_code, exc.message, exc.status
    if isinstance(exc, HTTPException):
        code = str(getattr(exc, "error_type", "") or type(exc).__name__).rsplit("#", 1)[-1]
        return code, str(getattr(exc, "message", "") or exc.description or ""), int(exc.code or 400)
    if isinstance(exc, ServiceException):
        return str(exc.code), str(exc.message), 400
    log.error("in-process AWS call failed: %s", what, exc_info=exc)
    return "InternalFailure", "local AWS emulation failed", 500


def moto_action(
    handler_class: type, region: str, account: str, around: Callable[[], contextlib.AbstractContextManager[Any]]
) -> Callable[[str, dict[str, Any]], Any]:
    """Run one operation of a moto response class with `params` as its parsed request body, inside `around`; its
    result as a dict."""
    from moto.core.responses import ActionResult

    def run(method: str, params: dict[str, Any]) -> Any:
        handler = handler_class()
        handler.current_account = account
        handler.region = region
        handler.body = params
        handler.params = params
        handler.uri_match = {}
        handler.querystring = {}
        handler.automated_parameter_parsing = True
        with around():
            result = getattr(handler, method)()
            return result.result if isinstance(result, ActionResult) else {}

    return run


def wrap(client: BaseClient, served: InProcessAws) -> Any:
    """The client to use for `client`: a DirectClient if its service has direct operations, else `client`."""
    from moto.core import DEFAULT_ACCOUNT_ID as account  # the account of the local stack's credentials

    prefix = client.meta.service_model.endpoint_prefix
    region = client.meta.region_name
    operations: dict[str, tuple[str, Callable[[dict[str, Any]], Any]]] = {}

    def through(run: Callable[[str, dict[str, Any]], Any], method: str) -> Callable[[dict[str, Any]], Any]:
        def serve(params: dict[str, Any]) -> Any:
            if not served.enabled:
                raise _UnservedError
            try:
                return run(method, params)
            finally:
                served.note_served()

        return serve

    if prefix == "states":
        if served.states is not None:  # the Step Functions process answers (orbital.local.sfn_worker)
            run = _forwarded(served)
        else:
            from moto.stepfunctions.responses import StepFunctionResponse

            run = moto_action(StepFunctionResponse, region, account, contextlib.nullcontext)
        operations = {m: (op, through(run, m)) for m, op in STEPFUNCTIONS_OPERATIONS.items()}
    elif prefix == "execute-api":
        operations = {"post_to_connection": ("PostToConnection", _post(served))}
    if not operations:
        return client
    return DirectClient(client, operations)


def _forwarded(served: InProcessAws) -> Callable[[str, dict[str, Any]], Any]:
    import asyncio

    def run(method: str, params: dict[str, Any]) -> Any:
        process = served.states  # the one running now (it is started again if it dies)
        try:
            asyncio.get_running_loop()
            timeout = LOOP_CALL_TIMEOUT  # a handler on the bridge's event loop: every socket waits for this answer
        except RuntimeError:
            timeout = CALL_TIMEOUT
        try:
            if process is None:
                raise WorkerGoneError("no Step Functions process")
            return process.call(method, params, timeout=timeout)
        except WorkerGoneError:
            # the gateway is not stopping (`through` saw to that): the process died, and retries cannot help
            raise WorkerRefusedError("ServiceUnavailable", "the local Step Functions process has ended", 503) from None
        except TimeoutError:
            message = f"the local Step Functions process did not answer within {timeout:g} s"
            raise WorkerRefusedError("ServiceUnavailable", message, 503) from None

    return run


def _post(served: InProcessAws) -> Callable[[dict[str, Any]], Any]:

    def serve(params: dict[str, Any]) -> Any:
        bridge = served.bridge
        if bridge is None or not served.enabled:
            raise _UnservedError
        data = params["Data"]
        if isinstance(data, str):
            data = data.encode("utf-8")
        try:
            status, headers, body = bridge.manage("POST", params["ConnectionId"], bytes(data), {})
        except (BridgeUnavailableError, TimeoutError):
            raise _UnservedError from None  # boto3's path: a connection error as over HTTP, with its retries
        served.note_served()
        if 200 <= status < 300:
            return {}
        try:
            message = str(json.loads(body).get("message", ""))
        except (ValueError, AttributeError):
            message = body.decode("utf-8", "replace")
        raise WorkerRefusedError(headers.get("x-amzn-ErrorType", "ClientError"), message, status)

    return serve

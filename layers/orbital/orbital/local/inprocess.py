"""Skip the loopback HTTP hop for AWS calls the local gateway answers itself.

Everything in `orbital dev` lives in one process: moto's backends, the WebSocket bridge (which is also the
management API) and the handlers. Over HTTP every DynamoDB, S3 or Step Functions call costs a TCP connection, a
server thread and moto's request routing (~5 ms each here, measured in docs/performance.md) before moto does any
work. A `before-send` hook on the gateway's own boto3 clients hands the signed request straight to the code that
would have served it:

- AWS services: moto's request dispatcher (the same one its server and `mock_aws` use), with the URL rewritten from
  the moto server's address to the service's AWS hostname so moto can route it;
- `apigatewaymanagementapi`: the bridge's management handler.

Only clients pointed at this process's own endpoints (same scheme, host and port) get the hook; the moto server keeps
listening for everything else (nodes following presigned S3 URLs, `orbital call`, tooling). Responses and errors go
through botocore as they would over HTTP: a stopped bridge raises EndpointConnectionError, a stuck one
ReadTimeoutError. Once the gateway stops, the hook steps aside and such clients go over HTTP to a closed port.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from orbital.local.bridge import BridgeUnavailableError

if TYPE_CHECKING:
    from botocore.awsrequest import AWSPreparedRequest, AWSResponse
    from botocore.client import BaseClient

    from orbital.local.bridge import Bridge
    from orbital.local.sfn_worker import StepFunctionsProcess

log = logging.getLogger("orbital.local")

_CONNECTION_PATH = re.compile(r"^(?:/[^/@]+)?/@connections/(?P<cid>[^/?]+)$")


Origin = tuple[str, str, int | None]


def _origin(url: str) -> Origin:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    return (parts.scheme, "127.0.0.1" if host == "localhost" else host, parts.port)


def _same_origins(endpoint: str) -> frozenset[Origin]:
    """The (scheme, host, port) of a server; `localhost` and `127.0.0.1` name the same one."""
    return frozenset({_origin(endpoint)})


def _response(url: str, status: int, headers: dict[str, str], body: bytes) -> AWSResponse:
    from botocore.awsrequest import AWSResponse
    from moto.core.botocore_stubber import MockRawResponse

    return AWSResponse(url, status, headers, MockRawResponse(body))


class InProcessAws:
    """Attach to a boto3 client (see `orbital.aws.clients.serve_in_process`) to serve it without HTTP."""

    MOTO_SERVICES = frozenset({"states"})
    """Endpoint prefixes answered in process: Step Functions (the child process, or moto's interpreter here)."""

    def __init__(self, moto_endpoint: str) -> None:
        from moto.core.botocore_stubber import BotocoreStubber

        self.moto_origins = _same_origins(moto_endpoint)
        self.bridge: Bridge | None = None
        self.management_origins: frozenset[Origin] = frozenset()
        self.states: StepFunctionsProcess | None = None
        """The process serving Step Functions, if they are not served in this one (orbital.local.sfn_worker)."""
        self.enabled = True
        """Cleared when the gateway stops: clients built earlier then go over HTTP (and fail to connect)."""
        self._moto = BotocoreStubber()
        self._moto.enabled = True
        self.served = 0
        """How many requests were answered in process so far."""
        self._lock = threading.Lock()

    def note_served(self) -> None:
        with self._lock:
            self.served += 1

    def serve_management(self, endpoint: str, bridge: Bridge | None = None) -> None:
        """Also answer the management API at `endpoint` (the bridge's address) in process, once `bridge` is set."""
        self.management_origins = _same_origins(endpoint)
        if bridge is not None:
            self.bridge = bridge

    # --- attaching --------------------------------------------------------------------------------------------

    def attach(self, client: BaseClient, endpoint: str | None = None) -> bool:
        """Serve `client` in process if it points at one of our endpoints. True if it was attached."""
        origin = _origin(endpoint or client.meta.endpoint_url)
        prefix = client.meta.service_model.endpoint_prefix
        if prefix in self.MOTO_SERVICES and origin in self.moto_origins:
            base = f"https://{prefix}.{client.meta.region_name}.amazonaws.com"
            client.meta.events.register_first("before-send", self._moto_hook(base))
            return True
        if prefix == "execute-api" and origin in self.management_origins:
            client.meta.events.register_first("before-send", self._management)
            return True
        return False

    def serve(self, client: BaseClient, endpoint: str | None = None) -> Any:
        """`attach`, and the client to use then: one answering the gateway's hottest operations without botocore
        (`orbital.local.direct`); None if `client` is not ours."""
        if not self.attach(client, endpoint):
            return None
        from orbital.local import direct  # lazy: the direct client and the moto internals it calls, when first used

        return direct.wrap(client, self)

    # --- moto -------------------------------------------------------------------------------------------------

    def _moto_hook(self, base: str) -> Any:
        def send(request: AWSPreparedRequest, **_: Any) -> AWSResponse | None:
            if not self.enabled or _origin(request.url) not in self.moto_origins:
                return None
            from botocore.awsrequest import AWSPreparedRequest

            parts = urlsplit(request.url)
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            # a copy: botocore re-sends the same request object on a retry, and it must still name our server
            rewritten = AWSPreparedRequest(
                method=request.method,
                url=base + path,
                headers=request.headers,
                body=request.body,
                stream_output=request.stream_output,
            )
            try:
                response = self._moto("before-send", rewritten)
            except Exception:
                log.exception("in-process AWS call failed: %s %s", request.method, rewritten.url)
                body = b'{"__type":"InternalFailure","message":"local AWS emulation failed"}'
                return _response(request.url, 500, {"x-amzn-ErrorType": "InternalFailure"}, body)
            if response is None:  # a URL moto does not route at all (unknown operations get moto's own 404)
                return None
            self.note_served()
            return response

        return send

    # --- the management API -----------------------------------------------------------------------------------

    def _management(self, request: AWSPreparedRequest, **_: Any) -> AWSResponse | None:
        if self.bridge is None or not self.enabled:  # not serving (yet, or any more): over HTTP like anyone else
            return None
        if _origin(request.url) not in self.management_origins:
            return None
        parts = urlsplit(request.url)
        match = _CONNECTION_PATH.match(parts.path)
        if match is None:
            return None
        body = request.body
        if body is None:
            data = b""
        elif isinstance(body, bytes):
            data = body
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = body.read()
        headers = {k.lower(): v.decode() if isinstance(v, bytes) else str(v) for k, v in request.headers.items()}
        try:
            status, out_headers, out_body = self.bridge.manage(
                request.method or "POST", unquote(match["cid"]), data, headers
            )
        except BridgeUnavailableError as exc:  # what a socket error would have been over HTTP (botocore retries it)
            from botocore.exceptions import EndpointConnectionError

            raise EndpointConnectionError(endpoint_url=request.url, error=exc) from exc
        except TimeoutError as exc:
            from botocore.exceptions import ReadTimeoutError

            raise ReadTimeoutError(endpoint_url=request.url, error=exc) from exc
        self.note_served()
        return _response(request.url, status, out_headers, out_body)

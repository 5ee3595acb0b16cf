"""Skip the loopback HTTP hop for AWS calls the local gateway answers itself.

Everything in `orbital dev` lives in one process: moto's backends, the WebSocket bridge (which is also the
management API) and the handlers. Over HTTP every DynamoDB, S3 or Step Functions call costs a TCP connection, a
server thread and moto's request routing (~5 ms each here, measured in docs/performance.md) before moto does any
work. A `before-send` hook on the gateway's own boto3 clients hands the signed request straight to the code that
would have served it:

- AWS services: moto's request dispatcher (the same one its server and `mock_aws` use), with the URL rewritten from
  the moto server's address to the service's AWS hostname so moto can route it;
- `apigatewaymanagementapi`: the bridge's management handler.

Only clients pointed at this process's own endpoints get the hook; the moto server keeps listening for everything
else (nodes following presigned S3 URLs, `orbital call`, tooling). Responses, errors and retries go through botocore
exactly as they would over HTTP.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from botocore.awsrequest import AWSPreparedRequest, AWSResponse
    from botocore.client import BaseClient

    from orbital.local.bridge import Bridge

log = logging.getLogger("orbital.local")

_CONNECTION_PATH = re.compile(r"^(?:/[^/@]+)?/@connections/(?P<cid>[^/?]+)$")
_LOOPBACK_NAMES = ("127.0.0.1", "localhost")


def _same_origins(endpoint: str) -> tuple[str, ...]:
    """`http://127.0.0.1:PORT` and `http://localhost:PORT` name the same server."""
    parts = urlsplit(endpoint.rstrip("/"))
    if parts.hostname in _LOOPBACK_NAMES and parts.port:
        return tuple(f"{parts.scheme}://{name}:{parts.port}" for name in _LOOPBACK_NAMES)
    return (f"{parts.scheme}://{parts.netloc}",)


def _response(url: str, status: int, headers: dict[str, str], body: bytes) -> AWSResponse:
    from botocore.awsrequest import AWSResponse
    from moto.core.botocore_stubber import MockRawResponse

    return AWSResponse(url, status, headers, MockRawResponse(body))


class InProcessAws:
    """Attach to a boto3 client (see `orbital.aws.clients.serve_in_process`) to serve it without HTTP."""

    MOTO_SERVICES = frozenset({"dynamodb", "s3", "states", "lambda"})
    """Endpoint prefixes dispatched to moto in process (what the gateway and the state machines call)."""

    def __init__(self, moto_endpoint: str) -> None:
        from moto.core.botocore_stubber import BotocoreStubber

        self.moto_origins = _same_origins(moto_endpoint)
        self.bridge: Bridge | None = None
        self.management_origins: tuple[str, ...] = ()
        self._moto = BotocoreStubber()
        self._moto.enabled = True
        self.served = 0

    def serve_management(self, endpoint: str, bridge: Bridge | None = None) -> None:
        """Also answer the management API at `endpoint` (the bridge's address) in process, once `bridge` is set."""
        self.management_origins = _same_origins(endpoint)
        if bridge is not None:
            self.bridge = bridge

    # --- attaching --------------------------------------------------------------------------------------------

    def attach(self, client: BaseClient, endpoint: str | None = None) -> bool:
        """Serve `client` in process if it points at one of our endpoints. True if it was attached."""
        url = (endpoint or client.meta.endpoint_url).rstrip("/")
        prefix = client.meta.service_model.endpoint_prefix
        if prefix in self.MOTO_SERVICES and url.startswith(self.moto_origins):
            base = f"https://{prefix}.{client.meta.region_name}.amazonaws.com"
            client.meta.events.register_first("before-send", self._moto_hook(base))
            return True
        if prefix == "execute-api" and self.management_origins and url.startswith(self.management_origins):
            client.meta.events.register_first("before-send", self._management)
            return True
        return False

    # --- moto -------------------------------------------------------------------------------------------------

    def _moto_hook(self, base: str) -> Any:
        def send(request: AWSPreparedRequest, **_: Any) -> AWSResponse | None:
            origin = next((o for o in self.moto_origins if request.url.startswith(o)), None)
            if origin is None:
                return None
            from botocore.awsrequest import AWSPreparedRequest

            # a copy: botocore re-sends the same request object on a retry, and it must still name our server
            rewritten = AWSPreparedRequest(
                method=request.method,
                url=base + request.url[len(origin) :],
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
            if response is None:  # moto has no route for it: let it go over HTTP and fail the usual way
                return None
            self.served += 1
            return response

        return send

    # --- the management API -----------------------------------------------------------------------------------

    def _management(self, request: AWSPreparedRequest, **_: Any) -> AWSResponse | None:
        if self.bridge is None:  # not serving yet: over HTTP like anyone else
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
        status, out_headers, out_body = self.bridge.manage(request.method or "POST", match["cid"], data, headers)
        self.served += 1
        return _response(request.url, status, out_headers, out_body)

"""One place that turns whatever an SDK raised into a ModelError, decides what is worth retrying, and scrubs secrets.

The adapters raise their SDK's exceptions unchanged (or IncompleteStreamError); `describe` reads them by duck typing
(status code, headers, body) so this module imports no SDK.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from orbital.agent.providers._types import ModelError, ProviderInfo

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504, 529})

# Error codes that carry no HTTP status of their own: Bedrock exception names, Anthropic stream error types,
# Gemini status names.
_CODE_STATUS = {
    "throttlingexception": 429,
    "toomanyrequestsexception": 429,
    "servicequotaexceededexception": 429,
    "serviceunavailableexception": 503,
    "internalserverexception": 500,
    "modelstreamerrorexception": 503,
    "modeltimeoutexception": 408,
    "modelnotreadyexception": 503,
    "validationexception": 400,
    "accessdeniedexception": 403,
    "unrecognizedclientexception": 401,
    "expiredtokenexception": 401,
    "resourcenotfoundexception": 404,
    "overloaded_error": 529,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "invalid_request_error": 400,
    "request_too_large": 413,
    "resource_exhausted": 429,
    "unavailable": 503,
    "internal": 500,
    "deadline_exceeded": 504,
    "unauthenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "invalid_argument": 400,
    "server_error": 500,
    "rate_limit_exceeded": 429,
}

# Exception class names (anywhere in the MRO) that mean the connection failed or timed out.
_CONNECTION_CLASSES = frozenset(
    {
        "APIConnectionError",
        "APITimeoutError",
        "TransportError",
        "TimeoutException",
        "NetworkError",
        "RemoteProtocolError",
        "ProtocolError",
        "ConnectError",
        "ReadTimeout",
        "ReadError",
        "ReadTimeoutError",
        "ConnectTimeoutError",
        "EndpointConnectionError",
        "ConnectionClosedError",
        "HTTPClientError",
        "IncompleteRead",
        "ConnectionError",
        "TimeoutError",
        "IncompleteStreamError",
    }
)

_OVERFLOW = re.compile(
    r"prompt is too long|context[_ ]length[_ ]exceeded|maximum context length|context window|context length"
    r"|input is too long|too long for|too many (input )?tokens|exceeds the maximum number of tokens"
    r"|input token count.*exceeds|reduce the length of the messages|request too large for model",
    re.IGNORECASE,
)
_NOT_FOUND = re.compile(
    r"model[^.]{0,80}(not found|does not exist|not exist|is not supported|unknown)|no such model|unknown model"
    r"|invalid model|model_not_found|model identifier is invalid",
    re.IGNORECASE,
)

# (pattern, keep the first group): headers, key query parameters, and anything shaped like a known key format.
_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], bool], ...] = (
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), True),
    (
        re.compile(
            r"(?i)((?:x-api-key|x-goog-api-key|api[-_]?key|authorization)[\"']?\s*[:=]\s*[\"']?)[^\s\"',&}]{6,}"
        ),
        True,
    ),
    (re.compile(r"(?i)([?&](?:key|api_key|apikey|access_token|token)=)[^&#\s\"']+"), True),
    (re.compile(r"\bsk-(?:ant-|proj-|or-)?[A-Za-z0-9_-]{12,}"), False),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{20,}"), False),
)


class IncompleteStreamError(Exception):
    """The stream ended before the provider said it was done (a dropped connection)."""


class EmptyResponseError(Exception):
    """The provider answered with no content at all."""


def secrets_of(info: ProviderInfo) -> tuple[str, ...]:
    """What a call to this provider sends that must never be shown: its key, and every configured header value
    (headers are where provider credentials go) together with each long word of it (the credentials of
    `Basic <credentials>` or `Bearer <token>`, should an answer echo them alone)."""
    found = [info.api_key] if info.api_key else []
    for value in info.headers.values():
        found += [text for text in (value, *value.split()) if len(text) >= 8]
    return tuple(dict.fromkeys(found))


def sanitize(text: str, secrets: tuple[str | None, ...] = ()) -> str:
    """`text` with every known secret and anything shaped like a key, token or key query parameter replaced."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    for pattern, keep in _SECRET_PATTERNS:
        text = pattern.sub((lambda m: m.group(1) + "***") if keep else "***", text)
    return text


@dataclass
class Failure:
    """What an exception says, independent of the SDK that raised it."""

    status: int | None = None
    code: str | None = None
    message: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    connection: bool = False


def _class_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def _body_message(body: Any) -> tuple[str | None, str | None]:
    """(message, code) from an error body of any of the four wire shapes."""
    if isinstance(body, str | bytes):
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        try:
            body = json.loads(text)
        except ValueError:
            return (text.strip() or None), None
    if isinstance(body, list) and body:
        body = body[0]
    if not isinstance(body, dict):
        return None, None
    err = body.get("error", body)
    if isinstance(err, str):
        return err, _str(body.get("code")) or _str(body.get("type"))
    if not isinstance(err, dict):
        return None, None
    message = _str(err.get("message")) or _str(body.get("message")) or _str(err.get("Message"))
    code = _str(err.get("code")) or _str(err.get("status")) or _str(err.get("type")) or _str(body.get("__type"))
    return message, code


def _str(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def describe(exc: BaseException) -> Failure:
    """Read status, code, message and headers from an SDK exception, by duck typing."""
    failure = Failure(message=str(exc))
    names = _class_names(exc)

    if names & {"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"}:
        failure.status = 401
        return failure
    if "ParamValidationError" in names:
        failure.status = 400
        return failure

    # botocore ClientError (and EventStreamError): response["Error"], ["ResponseMetadata"]
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and isinstance(response.get("Error"), dict):
        error = response["Error"]
        meta = response.get("ResponseMetadata") or {}
        failure.code = _str(error.get("Code"))
        failure.message = _str(error.get("Message")) or failure.message
        status = meta.get("HTTPStatusCode")
        failure.status = status if isinstance(status, int) and status >= 400 else None
        headers = meta.get("HTTPHeaders") or {}
        failure.headers = {str(k).lower(): str(v) for k, v in headers.items()}
        if failure.code and failure.status is None:
            failure.status = _CODE_STATUS.get(failure.code.lower())
        return failure

    # anthropic / openai APIStatusError: status_code, response.headers, body
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int):
        status = getattr(exc, "code", None)  # google.genai APIError
        status = status if isinstance(status, int) and not isinstance(status, bool) else None
    body = getattr(exc, "body", None)
    if body is None:
        body = getattr(exc, "details", None)
    message, code = _body_message(body)
    if message:
        failure.message = message
    api_message = getattr(exc, "api_message", None)
    if isinstance(api_message, str) and api_message:
        failure.message = api_message
    if code is None:
        code = _str(getattr(exc, "status", None)) if not isinstance(getattr(exc, "status", None), int) else None
    failure.code = code
    if response is not None:
        raw_headers = getattr(response, "headers", None)
        if raw_headers is not None:
            try:
                failure.headers = {str(k).lower(): str(v) for k, v in raw_headers.items()}
            except Exception:
                failure.headers = {}
    # An error event inside a 200 stream: the body's type says what it was.
    if status is not None and status < 400:
        status = None
    if status is None and code:
        status = _CODE_STATUS.get(code.lower())
    failure.status = status
    if status is None and (names & _CONNECTION_CLASSES or isinstance(exc, OSError)):
        failure.connection = True
    return failure


def retry_after(headers: dict[str, str]) -> float | None:
    """Seconds to wait as the response asked (retry-after-ms, or retry-after as seconds or an HTTP date)."""
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def is_transient(failure: Failure) -> bool:
    return failure.connection or (failure.status in TRANSIENT_STATUS)


def _short(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def summary(failure: Failure, secrets: tuple[str | None, ...] = ()) -> str:
    """A short safe description: "503 <provider message>", or "connection error: <detail>"."""
    detail = _short(sanitize(failure.message or "", secrets))
    if failure.status is not None:
        return f"{failure.status} {detail}".strip()
    return f"connection error: {detail}" if detail else "connection error"


def classify(failure: Failure, provider: str, model: str, secrets: tuple[str | None, ...]) -> ModelError:
    """The ModelError for a failure that will not be retried (or was retried out)."""
    detail = _short(sanitize(failure.message or "", secrets))
    status = failure.status
    text = f"{failure.code or ''} {failure.message or ''}"
    if status in (401, 403):
        return ModelError("auth", f"Authentication failed for provider {provider}: {detail or status}", False, status)
    if status in (400, 413, 422, None) and _OVERFLOW.search(text) and not failure.connection:
        return ModelError("overflow", f"Context window exceeded: {detail}", False, status)
    if status == 404 or (status in (400, 422) and _NOT_FOUND.search(text)):
        return ModelError("not_found", f"Model not found: {provider}/{model}", False, status)
    if is_transient(failure):
        return ModelError("transient", f"Model provider {provider} failed: {summary(failure, secrets)}", True, status)
    if status is not None and 400 <= status < 500:
        return ModelError("bad_request", f"Model request rejected by {provider} ({status}): {detail}", False, status)
    return ModelError("other", f"Model call to {provider} failed: {detail or type(failure).__name__}", False, status)

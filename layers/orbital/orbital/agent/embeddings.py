"""Text embeddings through a provider named in the configuration (WindieOS's `POST /api/embeddings/`).

| path                      | meaning                                                                              |
|---------------------------|--------------------------------------------------------------------------------------|
| `embeddings.provider`     | a provider name, resolved as for chat models: `providers.<name>.baseUrl` and          |
|                           | `apiKeys.<name>` (masked like every key). `bedrock` means Amazon Titan through        |
|                           | bedrock-runtime `InvokeModel`; any other name an OpenAI-compatible `/embeddings` API. |
| `embeddings.model`        | the model id (`text-embedding-3-small`, `amazon.titan-embed-text-v2:0`, …)            |
| `embeddings.dimensions`   | optional: the vector length asked of models that take one                            |
| `embeddings.timeoutMs`    | one call, at most (default 20000; 1000 to 120000)                                    |

Without a provider and a model (the default) embeddings are not configured. A call is made once, with its
timeout; a failure is described without the key (`EmbeddingsFailedError`).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from orbital.agent import budgets
from orbital.agent import spend as spend_caps
from orbital.agent.providers import ModelError, resolve_provider
from orbital.agent.providers._errors import describe, secrets_of, summary
from orbital.domain.compaction import estimate_text_tokens
from orbital.domain.config import as_dict
from orbital.settings import get_settings

if TYPE_CHECKING:
    from orbital.ports.services import Services

DEFAULT_TIMEOUT_MS = 20_000
MAX_TIMEOUT_MS = 120_000
MAX_DIMENSIONS = 16_384

KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
    "amazon.titan-embed-text-v1": 1536,
    "amazon.titan-embed-text-v2:0": 1024,
    "amazon.titan-embed-g1-text-02": 1536,
}
"""Vector lengths of common models, for the health route before any call has been made."""

_seen_dimensions: dict[tuple[str, str], int] = {}


class EmbeddingsNotConfiguredError(Exception):
    """Embeddings are not configured (the message says what is missing)."""


class EmbeddingsFailedError(Exception):
    """The provider could not be reached or refused; the message is safe to show (no key in it)."""


@dataclass(frozen=True)
class Setup:
    provider: str
    model: str
    dimensions: int | None
    timeout_s: float

    @property
    def space_version(self) -> str:
        return space_version(self.provider, self.model, self.expected_dimension())

    def expected_dimension(self) -> int | None:
        return self.dimensions or _seen_dimensions.get((self.provider, self.model)) or KNOWN_DIMENSIONS.get(self.model)


@dataclass(frozen=True)
class Embedding:
    vector: list[float]
    provider: str
    model: str

    @property
    def dimension(self) -> int:
        return len(self.vector)

    @property
    def space_version(self) -> str:
        return space_version(self.provider, self.model, self.dimension)


def space_version(provider: str, model: str, dimension: int | None) -> str:
    """`{provider}:{model}:{dimension}`: vectors of different spaces must not be compared (WindieOS's rule)."""
    return f"{provider}:{model}:{dimension if dimension else 'unknown'}"


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _positive(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        return None
    return int(value)


def setup(config: dict[str, Any]) -> Setup:
    """What `embed` would use; EmbeddingsNotConfiguredError when the section names no provider and model, or the
    provider has no
    key or endpoint."""
    section = as_dict(config.get("embeddings"))
    provider, model = _text(section.get("provider")), _text(section.get("model"))
    if provider is None or model is None:
        raise EmbeddingsNotConfiguredError(
            "Embeddings provider not configured (set embeddings.provider and embeddings.model)"
        )
    try:
        resolve_provider(config, provider)
    except ModelError as exc:
        raise EmbeddingsNotConfiguredError(f"Embeddings provider not configured: {exc.message}") from None
    dimensions = _positive(section.get("dimensions"))
    timeout_ms = _positive(section.get("timeoutMs")) or DEFAULT_TIMEOUT_MS
    return Setup(
        provider=provider.lower(),
        model=model,
        dimensions=min(dimensions, MAX_DIMENSIONS) if dimensions else None,
        timeout_s=min(max(timeout_ms, 1000), MAX_TIMEOUT_MS) / 1000,
    )


def embed(
    config: dict[str, Any], text: str, *, max_timeout_s: float | None = None, services: Services | None = None
) -> Embedding:
    """One vector for `text` from the configured provider, within `embeddings.timeoutMs` and `max_timeout_s` (what
    the caller can wait: on AWS, within API Gateway's 29 s). Raises EmbeddingsNotConfiguredError or
    EmbeddingsFailedError. With `services` the call is held to the gateway's token budgets and spend caps and counted
    there (its input is the text's estimate, settled to the provider's count when it gives one;
    `BudgetExceededError` / `SpendExceededError`)."""
    chosen = setup(config)
    if max_timeout_s is not None and chosen.timeout_s > max_timeout_s:
        chosen = replace(chosen, timeout_s=max_timeout_s)
    info = resolve_provider(config, chosen.provider)
    estimate = estimate_text_tokens(text)
    spend = None
    if services is not None:
        call = spend_caps.ModelCall(chosen.provider, chosen.model, estimate, max_output=0)
        spend = budgets.reserve(services, config, None, estimate, call=call)
    counted: list[int] = []
    try:
        if info.api == "bedrock":
            vector = _bedrock(info.base_url, info.region, chosen, text)
        else:
            vector = _openai_compatible(info.base_url, info.api_key, info.headers, chosen, text, counted)
    except EmbeddingsFailedError:
        if spend is not None:
            spend.release()
        raise
    except Exception as exc:
        if spend is not None:
            spend.release()
        raise EmbeddingsFailedError(
            f"Embeddings provider {chosen.provider} failed: {summary(describe(exc), secrets_of(info))}"
        ) from None
    if spend is not None:
        tokens = counted[0] if counted else estimate
        spend.settle(tokens, {"input": tokens, "output": 0})
    if not vector or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in vector):
        raise EmbeddingsFailedError(f"Embeddings provider {chosen.provider} returned no vector")
    floats = [float(x) for x in vector]
    _seen_dimensions[(chosen.provider, chosen.model)] = len(floats)
    return Embedding(floats, chosen.provider, chosen.model)


def _openai_compatible(
    base_url: str | None,
    api_key: str | None,
    headers: dict[str, str],
    chosen: Setup,
    text: str,
    counted: list[int] | None = None,
) -> list[Any]:
    import openai

    extra: dict[str, Any] = {"dimensions": chosen.dimensions} if chosen.dimensions else {}
    with openai.OpenAI(
        api_key=api_key,
        base_url=base_url or None,
        max_retries=0,
        timeout=chosen.timeout_s,
        default_headers=headers or None,
    ) as client:
        response = client.embeddings.create(model=chosen.model, input=text, encoding_format="float", **extra)
    tokens = getattr(getattr(response, "usage", None), "prompt_tokens", None)
    if counted is not None and isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
        counted.append(tokens)  # the provider's own count, for the spend
    data = getattr(response, "data", None) or []
    if not data:
        raise EmbeddingsFailedError(f"Embeddings provider {chosen.provider} returned no vector")
    return list(getattr(data[0], "embedding", None) or [])


@functools.cache
def _bedrock_client(endpoint_url: str | None, region: str | None, timeout_s: float) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"total_max_attempts": 1, "mode": "standard"},
        connect_timeout=min(10.0, timeout_s),
        read_timeout=timeout_s,
    )
    kwargs: dict[str, Any] = {"region_name": region or get_settings().region, "config": config}
    if endpoint_url:
        kwargs["endpoint_url"] = endpoint_url
    return boto3.session.Session().client("bedrock-runtime", **kwargs)


def _bedrock(endpoint_url: str | None, region: str | None, chosen: Setup, text: str) -> list[Any]:
    """Amazon Titan text embeddings: `{"inputText"}` (and `dimensions` for v2) in, `{"embedding"}` out."""
    body: dict[str, Any] = {"inputText": text}
    if chosen.dimensions and "v2" in chosen.model:
        body["dimensions"] = chosen.dimensions
    client = _bedrock_client(endpoint_url, region, chosen.timeout_s)
    response = client.invoke_model(
        modelId=chosen.model, body=json.dumps(body), contentType="application/json", accept="application/json"
    )
    payload = json.loads(response["body"].read())
    vector = payload.get("embedding") if isinstance(payload, dict) else None
    return list(vector) if isinstance(vector, list) else []

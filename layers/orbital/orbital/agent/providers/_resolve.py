"""Which provider a name means: wire API, endpoint, key and headers, read from the configuration and environment.

Key: `apiKeys.<name>` (a non-empty string), else the provider's usual environment variable.
Endpoint: `providers.<name>.baseUrl`, else the SDK's usual environment variable (built-in providers), else the
built-in default. Local servers (ollama, lmstudio, vllm, or any loopback base URL) need no key.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from typing import Any
from urllib.parse import urlsplit

from orbital.agent.providers._types import DEFAULT_MAX_TOKENS, ModelError, ProviderInfo

ALIASES = {"amazon-bedrock": "bedrock", "gemini": "google"}

# The wire API of the built-in names, and the environment variables each reads.
NATIVE = {"anthropic": "anthropic", "openai": "openai", "google": "google", "bedrock": "bedrock"}
COMPATIBLE_DEFAULTS: dict[str, str | None] = {
    "openrouter": "https://openrouter.ai/api/v1",
    "groq": "https://api.groq.com/openai/v1",
    "ollama": "http://localhost:11434/v1",
    "lmstudio": "http://localhost:1234/v1",
    "vllm": None,
}
LOCAL_NAMES = frozenset({"ollama", "lmstudio", "vllm"})
KEY_ENV = {
    "anthropic": ("ANTHROPIC_API_KEY",),
    "openai": ("OPENAI_API_KEY",),
    "google": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "openrouter": ("OPENROUTER_API_KEY",),
    "groq": ("GROQ_API_KEY",),
}
BASE_URL_ENV = {
    "anthropic": ("ANTHROPIC_BASE_URL",),
    "openai": ("OPENAI_BASE_URL",),
    "google": ("GOOGLE_GEMINI_BASE_URL",),
}
WIRE_APIS = ("openai", "anthropic", "google")
LOCAL_PLACEHOLDER_KEY = "not-needed"


def canonical(provider: str) -> str:
    name = (provider or "").strip().lower()
    return ALIASES.get(name, name)


def _section(config: dict[str, Any] | None, *path: str) -> dict[str, Any]:
    node: Any = config or {}
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def provider_settings(config: dict[str, Any] | None, provider: str) -> dict[str, Any]:
    """`providers.<name>` for the name as given, merged over the canonical name's section."""
    providers = _section(config, "providers")
    name = canonical(provider)
    merged: dict[str, Any] = {}
    for key in dict.fromkeys((name, *(alias for alias, target in ALIASES.items() if target == name), provider)):
        section = providers.get(key)
        if isinstance(section, dict):
            merged.update(section)
    return merged


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def env_key_names(provider: str) -> tuple[str, ...]:
    name = canonical(provider)
    if name in KEY_ENV:
        return KEY_ENV[name]
    return (re.sub(r"[^A-Za-z0-9]", "_", name).upper() + "_API_KEY",)


def _api_key(config: dict[str, Any] | None, provider: str) -> str | None:
    keys = _section(config, "apiKeys")
    for name in dict.fromkeys((provider, provider.strip().lower(), canonical(provider))):
        value = _text(keys.get(name))
        if value:
            return value
    for var in env_key_names(provider):
        value = _text(os.environ.get(var))
        if value:
            return value
    return None


def is_loopback(url: str | None) -> bool:
    if not url:
        return False
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _headers(settings: dict[str, Any]) -> dict[str, str]:
    raw = settings.get("headers")
    if not isinstance(raw, dict):
        return {}
    return {str(k): str(v) for k, v in raw.items() if isinstance(v, str | int | float) and not isinstance(v, bool)}


def resolve_provider(config: dict[str, Any] | None, provider: str) -> ProviderInfo:
    """Resolve a provider name to its wire API, base URL, key and headers (see the module docstring).

    Raises ModelError(kind="auth") when a key is needed and none is found, and ModelError(kind="not_found") for a
    name that is neither built in nor configured with `providers.<name>.baseUrl`.
    """
    shown = (provider or "").strip()
    name = canonical(provider)
    settings = provider_settings(config, provider)
    base_url = _text(settings.get("baseUrl"))
    headers = _headers(settings)

    if name == "bedrock":
        region = _text(settings.get("region")) or _text(os.environ.get("AWS_REGION"))
        region = region or _text(os.environ.get("AWS_DEFAULT_REGION"))
        return ProviderInfo(name, "bedrock", base_url, None, headers, region, is_loopback(base_url), settings)

    if name in NATIVE:
        api = NATIVE[name]
        if base_url is None:
            for var in BASE_URL_ENV.get(name, ()):
                base_url = _text(os.environ.get(var))
                if base_url:
                    break
    elif name in COMPATIBLE_DEFAULTS:
        api = _wire_api(settings, shown)
        base_url = base_url or COMPATIBLE_DEFAULTS[name]
        if base_url is None:
            raise ModelError(
                "not_found",
                f"Provider {shown} has no endpoint: set providers.{shown}.baseUrl (e.g. http://host:8000/v1)",
            )
    else:
        if not name or base_url is None:
            if name and _api_key(config, provider):
                raise ModelError(
                    "not_found",
                    f"Unknown model provider: {shown}: set providers.{shown}.baseUrl to its endpoint "
                    f'(and providers.{shown}.api to "anthropic" if it does not speak the OpenAI API)',
                )
            raise ModelError("not_found", f"Unknown model provider: {shown}")
        api = _wire_api(settings, shown)

    local = name in LOCAL_NAMES or is_loopback(base_url)
    key = _api_key(config, provider)
    if key is None:
        if not local:
            raise ModelError("auth", f"API key not configured for provider: {shown}")
        key = LOCAL_PLACEHOLDER_KEY
    return ProviderInfo(name, api, base_url, key, headers, None, local, settings)


def _wire_api(settings: dict[str, Any], shown: str) -> str:
    api = _text(settings.get("api"))
    if api is None:
        return "openai"
    api = api.lower()
    api = {"openai-completions": "openai", "anthropic-messages": "anthropic", "google-generative-ai": "google"}.get(
        api, api
    )
    if api not in WIRE_APIS:
        raise ModelError("bad_request", f'providers.{shown}.api must be "openai" or "anthropic", not {api!r}')
    return api


def has_credentials(config: dict[str, Any] | None, provider: str) -> bool:
    """True when a call to this provider would not fail for want of a key or an endpoint."""
    try:
        resolve_provider(config, provider)
    except ModelError:
        return False
    return True


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        return None
    return int(value)


def bare_model(model: str) -> str:
    """The model id, lower case, without a vendor prefix: "openai/o3" → "o3"."""
    name = (model or "").strip().lower()
    if "/" in name:
        name = name.rsplit("/", 1)[-1]
    return name


_WINDOWS: tuple[tuple[str, int], ...] = (
    (r"claude", 200_000),
    (r"gpt-4\.1", 1_047_576),
    (r"gpt-5", 400_000),
    (r"gpt-4o|chatgpt-4o|gpt-4-turbo", 128_000),
    (r"(^|[./:])o[1-9](-|$|\b)", 200_000),
    (r"gemini", 1_048_576),
    (r"nova-(pro|lite)", 300_000),
    (r"llama|mistral|mixtral|qwen|deepseek|gemma|phi|command", 128_000),
)


def context_window(config: dict[str, Any] | None, provider: str, model: str) -> int:
    """`providers.<name>.contextWindow` if set, else a built-in figure for the model family, else 128000."""
    configured = _positive_int(provider_settings(config, provider).get("contextWindow"))
    if configured:
        return configured
    name = (model or "").strip().lower()
    for pattern, window in _WINDOWS:
        if re.search(pattern, name):
            return window
    return 128_000


def max_tokens(request_max: int | None, info: ProviderInfo) -> int:
    """The output budget: the request's own, else `providers.<name>.maxTokens`, else 8192."""
    return _positive_int(request_max) or _positive_int(info.settings.get("maxTokens")) or DEFAULT_MAX_TOKENS

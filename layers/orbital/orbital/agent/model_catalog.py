"""The models this gateway can call, from its configuration: for clients that offer a model picker (WindieOS's
`list-models` over `/ws`; its `GET /api/sdk/models` lists the same entries, `local` then `online`).

    catalog(config) -> {"local": [...], "online": [...], "vision": [...]}

A provider counts when the configuration names it (the default `model`, a `providers.<name>` section or an
`apiKeys.<name>`) and a call to it would not fail for want of a key or an endpoint (`has_credentials`). Its models
are `providers.<name>.models` when the configuration lists them (ids, or `{id, name?, contextWindow?, vision?}`),
else a few well-known ones for the built-in providers; the default model is always there. Local servers (ollama,
lmstudio, vllm) are `local`, the rest `online`; `vision` repeats the entries that take images. Each entry:
`{id, provider, display_name, runtime_model_id, context_window, supports_vision, is_default}`. Nothing secret is in
it, and nothing is fetched from a provider.
"""

from __future__ import annotations

import re
from typing import Any

from orbital.agent.providers import context_window, has_credentials
from orbital.agent.providers._resolve import LOCAL_NAMES, canonical
from orbital.domain.config import as_dict

WELL_KNOWN: dict[str, tuple[str, ...]] = {
    "anthropic": ("claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5"),
    "openai": ("gpt-5", "gpt-5-mini", "gpt-4.1"),
    "google": ("gemini-2.5-pro", "gemini-2.5-flash"),
}
"""Models offered for a built-in provider whose configuration lists none."""
VISION = re.compile(r"claude|gpt-4o|gpt-4\.1|gpt-5|gemini|llava|vision|-vl|pixtral", re.IGNORECASE)
"""Model families that take images (a configured entry's `vision` says otherwise)."""
CHOICE_SEPARATOR = "@@"
"""WindieOS's model choices may carry a variant after this (`gpt-5.4@@gpt-5-4-none-thinking`): the model id is what
comes before it."""


def runtime_model_id(choice: str) -> str:
    """The model id a client's choice means (its own variant suffix dropped)."""
    return choice.split(CHOICE_SEPARATOR, 1)[0].strip()


def is_local(provider: str) -> bool:
    """Whether a provider's models run on this machine (a local server: `local`), else `online`."""
    return canonical(provider) in LOCAL_NAMES


def _default(config: dict[str, Any]) -> dict[str, str] | None:
    model = config.get("model")
    if isinstance(model, dict) and isinstance(model.get("id"), str) and model["id"]:
        return {"provider": str(model.get("provider") or "anthropic"), "id": model["id"]}
    return None


def providers(config: dict[str, Any]) -> list[str]:
    """The providers the configuration names, default model's first, each once."""
    names: list[str] = []
    default = _default(config)
    if default is not None:
        names.append(default["provider"])
    names += [str(n) for n in as_dict(config.get("providers"))]
    names += [str(n) for n, v in as_dict(config.get("apiKeys")).items() if isinstance(v, str) and v.strip()]
    seen: dict[str, str] = {}
    for name in names:
        seen.setdefault(canonical(name), name)
    return list(seen.values())


def _entry(config: dict[str, Any], provider: str, given: Any, default: dict[str, str] | None) -> dict[str, Any] | None:
    spec = given if isinstance(given, dict) else {"id": given}
    model_id = spec.get("id")
    if not isinstance(model_id, str) or not model_id.strip():
        return None
    model_id = model_id.strip()
    name = spec.get("name") if isinstance(spec.get("name"), str) and spec.get("name") else f"{provider}/{model_id}"
    window = spec.get("contextWindow")
    vision = spec.get("vision")
    return {
        "id": model_id,
        "provider": provider,
        "display_name": name,
        "runtime_model_id": model_id,
        "context_window": int(window)
        if isinstance(window, int) and window > 0
        else context_window(config, provider, model_id),
        "supports_vision": bool(vision) if isinstance(vision, bool) else bool(VISION.search(model_id)),
        "is_default": default is not None
        and default["id"] == model_id
        and canonical(default["provider"]) == canonical(provider),
    }


def catalog(config: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """What a model picker offers (see the module docstring). `config`: the effective configuration."""
    default = _default(config)
    local: list[dict[str, Any]] = []
    online: list[dict[str, Any]] = []
    for provider in providers(config):
        if not has_credentials(config, provider):
            continue
        listed = as_dict(as_dict(config.get("providers")).get(provider)).get("models")
        models: list[Any] = list(listed) if isinstance(listed, list) else list(WELL_KNOWN.get(canonical(provider), ()))
        if default is not None and canonical(default["provider"]) == canonical(provider):
            models.insert(0, default["id"])
        entries: dict[str, dict[str, Any]] = {}
        for given in models:
            entry = _entry(config, provider, given, default)
            if entry is not None and entry["id"] not in entries:
                entries[entry["id"]] = entry
        (local if is_local(provider) else online).extend(entries.values())
    vision = [
        {"id": e["id"], "provider": e["provider"], "display_name": e["display_name"]}
        for e in local + online
        if e["supports_vision"]
    ]
    return {"local": local, "online": online, "vision": vision}


def is_offered(config: dict[str, Any], provider: str, model_id: str) -> bool:
    """Whether `catalog` lists this model (a client's choice is checked against it)."""
    found = catalog(config)
    wanted = canonical(provider)
    return any(canonical(e["provider"]) == wanted and e["id"] == model_id for e in found["local"] + found["online"])

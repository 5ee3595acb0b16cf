"""A user's settings (`load-settings`, `update-settings`), `list-models` and `wakeword-detected`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.agent import model_catalog
from orbital.dialects import base
from orbital.dialects.windie.common import (
    GREETING,
    IGNORED_SETTINGS,
    MODEL_KEYS,
    PROVIDER_NAME,
    SETTING_CHOICES,
    SETTING_DEFAULTS,
    SETTING_FLAGS,
    _InvalidFrameError,
)
from orbital.dialects.windie.frames import _plain, _WindieSocket
from orbital.domain.config import as_dict
from orbital.store.windie_settings import WindieSettingsRepo

if TYPE_CHECKING:
    from orbital.ports.services import Services


def load_settings_item(services: Services, user_id: str) -> dict[str, Any]:
    """A user's stored settings (what they changed; nothing secret)."""
    return WindieSettingsRepo(services.table).load(user_id)


def _chosen_model(config: dict[str, Any], stored: dict[str, Any]) -> dict[str, str] | None:
    """The model a user chose (`update-settings`), while the configured providers still offer it (else none: the
    gateway's model)."""
    provider, choice = stored.get("model_provider"), stored.get("selected_model_id")
    if isinstance(provider, str) and provider and isinstance(choice, str) and choice:
        model_id = model_catalog.runtime_model_id(choice)
        if model_id and model_catalog.is_offered(config, provider, model_id):
            return {"provider": provider, "id": model_id}
    return None


def _check_model_choice(config: dict[str, Any], stored: dict[str, Any], changes: dict[str, Any]) -> None:
    """Refuse a model choice the configured providers do not offer (`list-models`): a client picks among the
    owner's models, it does not name one to call (and pay for)."""
    model = as_dict(config.get("model"))
    provider = changes.get("model_provider") or stored.get("model_provider") or model.get("provider") or "anthropic"
    choice = changes.get("selected_model_id") or stored.get("selected_model_id") or model.get("id") or ""
    model_id = model_catalog.runtime_model_id(str(choice))
    if not model_id or not model_catalog.is_offered(config, str(provider), model_id):
        raise _InvalidFrameError(
            f"Model not offered by this gateway: {str(provider)[:60]}/{model_id[:100]} (see list-models)"
        )


def settings_view(services: Services, user_id: str) -> dict[str, Any]:
    """`settings-loaded`'s config: the user's settings over the defaults, the gateway's model when they chose none,
    and the providers with every `api_key` blank."""
    config = services.config.effective()
    stored = load_settings_item(services, user_id)
    view = {name: stored.get(name, default) for name, default in SETTING_DEFAULTS.items()}
    model = as_dict(config.get("model"))
    view["model_provider"] = str(stored.get("model_provider") or model.get("provider") or "anthropic")
    view["selected_model_id"] = str(stored.get("selected_model_id") or model.get("id") or "")
    enabled = as_dict(stored.get("provider_enabled"))
    names = list(dict.fromkeys([*model_catalog.providers(config), *enabled]))
    view["provider_api_keys"] = {name: {"enabled": bool(enabled.get(name, True)), "api_key": ""} for name in names}
    return view


def _load_settings(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    return [_plain("settings-loaded", {"config": settings_view(services, sock.user)}, rid, user=sock.user)]


def _provider_keys(value: Any) -> tuple[dict[str, bool], dict[str, str]]:
    """`provider_api_keys` as (enabled flags, keys to set); a blank `api_key` (what `settings-loaded` shows) keeps
    the key there is."""
    if not isinstance(value, dict):
        raise _InvalidFrameError("provider_api_keys must be an object")
    enabled: dict[str, bool] = {}
    secrets_given: dict[str, str] = {}
    for name, entry in value.items():
        if not isinstance(name, str) or not PROVIDER_NAME.match(name) or not isinstance(entry, dict):
            raise _InvalidFrameError("provider_api_keys entries are {provider: {enabled, api_key}}")
        if "enabled" in entry:
            if not isinstance(entry["enabled"], bool):
                raise _InvalidFrameError(f"provider_api_keys.{name}.enabled must be true or false")
            enabled[name] = entry["enabled"]
        key = entry.get("api_key")
        if key is not None and not isinstance(key, str):
            raise _InvalidFrameError(f"provider_api_keys.{name}.api_key must be a string")
        if key and key.strip():
            secrets_given[name] = key.strip()
    return enabled, secrets_given


def _update_settings(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    changes: dict[str, Any] = {}
    updated: list[str] = []
    enabled: dict[str, bool] = {}
    provider_keys: dict[str, str] = {}
    for name, value in payload.items():
        if name in IGNORED_SETTINGS:
            continue
        if name in SETTING_FLAGS:
            if not isinstance(value, bool):
                raise _InvalidFrameError(f"{name} must be true or false")
            changes[name] = value
        elif name in SETTING_CHOICES:
            if value not in SETTING_CHOICES[name]:
                raise _InvalidFrameError(f"{name} must be one of {', '.join(sorted(SETTING_CHOICES[name]))}")
            changes[name] = value
        elif name in MODEL_KEYS:
            if not isinstance(value, str) or not value.strip() or len(value) > 200:
                raise _InvalidFrameError(f"{name} must be a non-empty string")
            changes[name] = value.strip()
        elif name == "provider_api_keys":
            enabled, provider_keys = _provider_keys(value)
        else:
            raise _InvalidFrameError(f"Unknown setting: {str(name)[:60]}")
        updated.append(name)
    if provider_keys and not sock.admin:
        raise _InvalidFrameError("Provider API keys can be set only with the gateway's own token")
    for provider, secret in provider_keys.items():  # through config.set: its rules, its masking, its audit
        done = base.call(services, sock.conn, "config.set", {"path": f"apiKeys.{provider}", "value": secret})
        if not done.ok:
            raise _InvalidFrameError(f"Could not set the key of {provider}: {done.message}")
    stored = load_settings_item(services, sock.user)
    if any(name in changes for name in MODEL_KEYS):  # (with the keys just set: a provider they make usable counts)
        _check_model_choice(services.config.effective(), stored, changes)
    if changes or enabled:
        stored.update(changes)
        if enabled:
            stored["provider_enabled"] = {**(stored.get("provider_enabled") or {}), **enabled}
        stored["updatedAt"] = services.now_ms()
        WindieSettingsRepo(services.table).save(sock.user, stored)
    return [_plain("settings-updated", {"updated_keys": updated}, rid, user=sock.user)]


def _list_models(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    return [_plain("models-listed", model_catalog.catalog(services.config.effective()), rid, user=sock.user)]


def _wakeword(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    speech = bool(settings_view(services, sock.user).get("speech_mode_enabled"))
    activated = {"speech_mode_enabled": speech, "greeting": GREETING, "status": "listening"}
    return [
        _plain("wakeword-activated", activated, rid, user=sock.user),
        _plain("wakeword-greeting", {"text": GREETING}, rid, user=sock.user),
    ]

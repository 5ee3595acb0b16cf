"""The composition root: the one place that puts the gateway together. It gives `Services` (the ports,
`orbital.ports.services`) the method registry of `orbital.methods`, whose hooks carry every family's reactions
(socket loss, deferred-call kinds, workflow steps, a run's replies and end, the native tools above the tools layer).

Every entry point reaches its Services here (`get_services`): the Lambda functions through the runtime's handlers and
the HTTP app, the local gateway, and the tests (`build_services`, `use_services`). Code below the runtime is handed
its Services and never comes here.
"""

from __future__ import annotations

import functools

from orbital import methods
from orbital.aws.push import Sender
from orbital.ports.services import Services
from orbital.settings import Settings, get_settings


def build_services(settings: Settings, *, sender: Sender | None = None) -> Services:
    """The gateway's Services for `settings`: the registry of `orbital.methods`, assembled on its first use."""
    return Services(settings, sender=sender, registry=methods.registry)


@functools.cache
def _services_for(settings: Settings) -> Services:
    return build_services(settings)


_override: Services | None = None


def get_services() -> Services:
    """The Services of this container (or the one installed with `use_services`, e.g. by tests)."""
    if _override is not None:
        return _override
    return _services_for(get_settings())


def use_services(services: Services | None) -> None:
    global _override
    _override = services


def reset_services() -> None:
    _services_for.cache_clear()
    use_services(None)

"""The one method registry: wire name -> params model, result model, handler, allowed modes.

Method modules each own a `Router`; `orbital.methods.build_registry()` includes them explicitly. Including the same
name twice raises, so a method can never be silently shadowed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext

Handler = Callable[["CallContext", Any], Any]


class Params(BaseModel):
    """Base for method params: unknown fields are ignored, as GSV does."""

    model_config = ConfigDict(extra="ignore")


class NoParams(Params):
    pass


class Result(BaseModel):
    """Base for documented result shapes (validated in the contract tests)."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class MethodSpec:
    name: str
    handler: Handler
    params: type[BaseModel]
    result: type[BaseModel] | None
    summary: str
    modes: frozenset[str] | None = None
    """Connection modes allowed to call the method (None: any connected socket)."""
    mode_error: tuple[int, str] = (101, "Not connected")
    """Code and message returned to a socket whose mode is not allowed."""
    deferred: bool = False
    """The response is sent later (tool.invoke, logs.get)."""


@dataclass
class Router:
    family: str
    methods: dict[str, MethodSpec] = field(default_factory=dict)

    def method(
        self,
        name: str,
        *,
        params: type[BaseModel] = NoParams,
        result: type[BaseModel] | None = None,
        modes: set[str] | None = None,
        mode_error: tuple[int, str] = (101, "Not connected"),
        deferred: bool = False,
    ) -> Callable[[Handler], Handler]:
        def register(func: Handler) -> Handler:
            if name in self.methods:
                raise ValueError(f"method registered twice: {name}")
            summary = (func.__doc__ or "").strip()
            self.methods[name] = MethodSpec(
                name=name,
                handler=func,
                params=params,
                result=result,
                summary=summary,
                modes=frozenset(modes) if modes else None,
                mode_error=mode_error,
                deferred=deferred,
            )
            return func

        return register


class Registry:
    def __init__(self) -> None:
        self._methods: dict[str, MethodSpec] = {}
        self._families: dict[str, list[str]] = {}

    def include(self, router: Router) -> None:
        for name, spec in router.methods.items():
            if name in self._methods:
                raise ValueError(f"method registered twice: {name}")
            self._methods[name] = spec
            self._families.setdefault(router.family, []).append(name)

    def get(self, name: str) -> MethodSpec | None:
        return self._methods.get(name)

    def names(self) -> list[str]:
        return list(self._methods)

    def families(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in self._families.items()}

    def __iter__(self) -> Iterator[MethodSpec]:
        return iter(self._methods.values())

    def __len__(self) -> int:
        return len(self._methods)

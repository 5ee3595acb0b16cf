"""The configuration's schema at work: checking a value against it, walking it, listing it.

`config.set` checks each write against it (`problems_at`): a wrong type, a value out of range or a model whose
provider is neither built in nor configured is refused with the path, what was expected and what was given, and
nothing is stored. A key the schema does not know is stored as before (GSV clients keep keys of their own), with a
warning that names the nearest known key (`unknown_keys`). `reference_rows` is what docs/configuration.md is made
of (`python -m orbital.methods.config_reference`).

The readers of each setting keep their own fallbacks (a value stored before this schema existed still reads as its
default); the defaults themselves are `orbital.domain.config.defaults()`.

The schema itself (every key the gateway reads, its type, its range and what it means: pydantic models) is
`orbital.domain.config_sections`.
"""

from __future__ import annotations

import difflib
import json
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from orbital.domain.config import MASK, defaults, get_path, is_missing, is_secret, masked_at
from orbital.domain.config_sections import _TYPE_TEXT, MODEL_FORM, Configuration, ModelRef, provider_problem
from orbital.domain.config_sections import AgentEntry as AgentEntry  # (the agent archive's import)
from orbital.domain.config_sections import normalize as normalize  # (config.set's)

# --- walking the schema ----------------------------------------------------------------------------------------------


def _strip(annotation: Any) -> Any:
    """The annotation without `| None`."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _inner(annotation: Any) -> Any:
    """The annotation without `| None` and without `Annotated`'s validators."""
    annotation = _strip(annotation)
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return _strip(annotation)


def _fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """The fields of a section by the key they have in the configuration."""
    return {info.alias or name: info for name, info in model.model_fields.items()}


def _section_of(annotation: Any) -> type[BaseModel] | None:
    inner = _inner(annotation)
    return inner if isinstance(inner, type) and issubclass(inner, BaseModel) else None


def _child(annotation: Any, segment: str) -> tuple[Any, bool] | None:
    """The annotation of `segment` under a value of type `annotation`, and whether the segment is a key the schema
    names; None when the schema says nothing below (a free-form value)."""
    section = _section_of(annotation)
    if section is not None:
        found = _fields(section).get(segment)
        return (found.annotation, True) if found is not None else None
    inner = _inner(annotation)
    origin = get_origin(inner)
    if origin is dict:
        return get_args(inner)[1], True
    if origin is list:
        return (get_args(inner)[0], True) if segment.isdigit() else None
    return None


def annotation_at(path: Sequence[str | int]) -> Any:
    """The schema's type at `path` (`Any` where it says nothing)."""
    annotation: Any = Configuration
    for segment in path:
        found = _child(annotation, str(segment))
        if found is None:
            return Any
        annotation = found[0]
    return annotation


def _known_keys(annotation: Any) -> list[str]:
    section = _section_of(annotation)
    return list(_fields(section)) if section is not None else []


def _suggest(key: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if not close:
        lowered = {k.lower(): k for k in known}
        close = [lowered[key.lower()]] if key.lower() in lowered else []
    return close[0] if close else ""


def unknown_keys(path: str, value: Any, *, deleting: bool = False) -> list[str]:
    """The keys written at `path` (the path's own segments, and the keys inside `value`) that the schema does not
    know, each as a sentence with the nearest known key: "unknown key `modle` — did you mean `model`?"."""
    found: list[str] = []
    annotation: Any = Configuration
    segments = path.split(".")
    for index, segment in enumerate(segments):
        known = _known_keys(annotation)
        step = _child(annotation, segment)
        if step is None:
            if known:
                found.append(_unknown(segments[: index + 1], known))
            return found
        annotation = step[0]
    if not deleting:
        found += _unknown_inside(annotation, value, segments)
    return found


def _unknown_inside(annotation: Any, value: Any, prefix: list[str]) -> list[str]:
    found: list[str] = []
    if isinstance(value, dict):
        known = _known_keys(annotation)
        for key, item in value.items():
            step = _child(annotation, str(key))
            if step is None:
                if known:
                    found.append(_unknown([*prefix, str(key)], known))
                continue
            found += _unknown_inside(step[0], item, [*prefix, str(key)])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            step = _child(annotation, str(index))
            if step is not None:
                found += _unknown_inside(step[0], item, [*prefix, str(index)])
    return found


def _unknown(segments: list[str], known: Sequence[str]) -> str:
    key = ".".join(segments)
    near = _suggest(segments[-1], known)
    if near:
        return f"unknown key `{key}` — did you mean `{'.'.join([*segments[:-1], near])}`?"
    return f"unknown key `{key}` (stored; this gateway does not read it)"


# --- checking --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One refused value: where, what the schema expects there, and what was given (masked when secret)."""

    path: str
    expected: str
    got: str

    def message(self) -> str:
        return f"{self.path}: expected {self.expected}, got {self.got}"

    def to_wire(self) -> dict[str, str]:
        return {"path": self.path, "expected": self.expected, "got": self.got}


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def shown_value(value: Any, path: Sequence[str]) -> str:
    """What was given, for a message: the JSON (clipped, secrets inside masked), or only its kind where a secret
    belongs (the path is a secret, holds secrets by name as `apiKeys` and `headers` do, or is a section with a
    secret key such as `auth`)."""
    if _holds_secret(path) and not (isinstance(value, str) and value == MASK):
        return _kind(value)
    text = json.dumps(masked_at(value, list(path)), ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "…"


def _holds_secret(path: Sequence[str]) -> bool:
    path = list(path)
    if is_secret(path) or is_secret([*path, "x"]):
        return True
    return any(is_secret([*path, key]) for key in _known_keys(annotation_at(path)))


def type_text(annotation: Any, info: FieldInfo | None = None) -> str:
    """A type as the reference and the refusals name it: "integer ≥ 1000", "one of `a`, `b`", "object"…"""
    stripped = _strip(annotation)
    if stripped in _TYPE_TEXT:
        return _TYPE_TEXT[stripped]
    inner = _inner(annotation)
    origin = get_origin(inner)
    bounds = _bounds(annotation, info)
    if inner is bool:
        return "boolean"
    if inner is int:
        return "integer" + bounds
    if inner is float:
        return "number" + bounds
    if inner is str:
        pattern = _metadata(annotation, "pattern")
        return "string" + (f" matching `{pattern}`" if pattern else "")
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in get_args(inner) if a != "")
    if origin is list:
        return f"list of {type_text(get_args(inner)[0])}"
    if origin is dict:
        return f"object of {type_text(get_args(inner)[1])} by name"
    if _section_of(annotation) is ModelRef:
        return MODEL_FORM
    if _section_of(annotation) is not None:
        return "object"
    return "any JSON value"


def _metadata(annotation: Any, name: str) -> Any:
    """A constraint (`ge`, `le`, `pattern`…) given in `Annotated` metadata at any depth."""
    node = _strip(annotation)
    while get_origin(node) is Annotated:
        for meta in get_args(node)[1:]:
            found = getattr(meta, name, None)
            if found is not None:
                return found
            for inner in getattr(meta, "metadata", []) or []:
                found = getattr(inner, name, None)
                if found is not None:
                    return found
        node = _strip(get_args(node)[0])
    return None


def _bounds(annotation: Any, info: FieldInfo | None) -> str:
    ge = le = None
    for meta in (info.metadata if info is not None else []) or []:
        ge = getattr(meta, "ge", ge)
        le = getattr(meta, "le", le)
    ge = ge if ge is not None else _metadata(annotation, "ge")
    le = le if le is not None else _metadata(annotation, "le")
    if ge is not None and le is not None:
        return f" from {ge} to {le}"
    if ge is not None:
        return f" ≥ {ge}"
    if le is not None:
        return f" ≤ {le}"
    return ""


def field_at(path: Sequence[str | int]) -> tuple[Any, FieldInfo | None]:
    """The annotation and (for a section's key) the field at `path`."""
    if not path:
        return Configuration, None
    parent = annotation_at(path[:-1])
    section = _section_of(parent)
    if section is not None:
        info = _fields(section).get(str(path[-1]))
        if info is not None:
            return info.annotation, info
    return annotation_at(path), None


def expected_at(path: Sequence[str | int]) -> str:
    annotation, info = field_at(path)
    return type_text(annotation, info)


def _problems(config: dict[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    try:
        Configuration.model_validate(config)
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            loc = [str(part) for part in error["loc"]]
            expected = expected_at(loc)
            got = shown_value(error.get("input"), loc)
            if error["type"] == "value_error":
                expected = str(error.get("ctx", {}).get("error") or error["msg"])
            elif error["type"] == "missing":
                expected, got = f"{expected} (required)", "nothing"
            problems.append(Problem(".".join(loc), expected, got))
    model = config.get("model")
    if isinstance(model, dict) and isinstance(model.get("provider"), str) and model["provider"]:
        why = provider_problem(config, model["provider"])
        if why is not None:
            problems.append(Problem("model.provider", why, shown_value(model["provider"], ["model", "provider"])))
    return problems


def problems_at(config: dict[str, Any], path: str) -> list[Problem]:
    """What is wrong in the effective `config` at, under or above `path` (the path just written): a value stored
    elsewhere before does not refuse this write."""
    wanted = path.split(".")
    found = []
    for problem in _problems(config):
        at = problem.path.split(".") if problem.path else []
        if at[: len(wanted)] == wanted or wanted[: len(at)] == at:
            found.append(problem)
    return found


def model_problem(config: dict[str, Any], model: dict[str, str]) -> Problem | None:
    """Why a model chosen for a session (`/model`) cannot be called: its provider is unknown."""
    why = provider_problem(config, model.get("provider"))
    if why is None:
        return None
    return Problem("model.provider", why, shown_value(model.get("provider"), ["model", "provider"]))


def refusal(problems: Sequence[Problem]) -> str:
    """The message of a refused write: each problem, "path: expected …, got …"; nothing was stored."""
    return "; ".join(p.message() for p in problems) + " (nothing was stored)"


# --- the reference ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One key of the reference (and of the console's Settings fields, through `config.schema`)."""

    path: str
    type: str
    default: Any
    description: str
    secret: bool
    kind: str = "object"
    """What a form shows for it: int, number, bool, string, enum, list, object or any."""
    minimum: float | None = None
    maximum: float | None = None
    options: tuple[str, ...] = ()
    pattern: str | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "type": self.type,
            "kind": self.kind,
            "description": self.description,
            "secret": self.secret,
        }
        if self.default is not None:
            out["default"] = self.default
        if self.minimum is not None:
            out["min"] = self.minimum
        if self.maximum is not None:
            out["max"] = self.maximum
        if self.options:
            out["options"] = list(self.options)
        if self.pattern:
            out["pattern"] = self.pattern
        return out


def _bound(annotation: Any, info: FieldInfo | None, name: str) -> float | None:
    for meta in (info.metadata if info is not None else []) or []:
        found = getattr(meta, name, None)
        if found is not None:
            return float(found) if not isinstance(found, int) else found
    found = _metadata(annotation, name)
    return found if isinstance(found, int | float) else None


def _form(annotation: Any, info: FieldInfo | None) -> dict[str, Any]:
    """How a form edits a key: its kind and constraints."""
    inner = _inner(annotation)
    origin = get_origin(inner)
    if inner is bool:
        return {"kind": "bool"}
    if inner in (int, float):
        return {
            "kind": "int" if inner is int else "number",
            "minimum": _bound(annotation, info, "ge"),
            "maximum": _bound(annotation, info, "le"),
        }
    if origin is Literal:
        return {"kind": "enum", "options": tuple(str(a) for a in get_args(inner) if a != "")}
    if inner is str:
        pattern = _metadata(annotation, "pattern")
        return {"kind": "string", "pattern": pattern if isinstance(pattern, str) else None}
    if origin is list:
        return {"kind": "list"}
    if origin is dict or _section_of(annotation) is not None:
        return {"kind": "object"}
    return {"kind": "any"}


def _rows(annotation: Any, prefix: list[str]) -> Iterator[Row]:
    section = _section_of(annotation)
    if section is None:
        return
    for key, info in _fields(section).items():
        path = [*prefix, key]
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        default = get_path(defaults(), ".".join(path))
        if is_missing(default) or (isinstance(default, dict | list) and not default and extra.get("default")):
            default = extra.get("default")
        child = _inner(info.annotation)
        origin = get_origin(child)
        nested = _section_of(info.annotation)
        if nested is not None and nested is not ModelRef:
            yield Row(".".join(path), "object", None, info.description or "", False)
            yield from _rows(nested, path)
            continue
        yield Row(
            ".".join(path),
            type_text(info.annotation, info),
            default,
            info.description or "",
            _secret(path),
            **_form(info.annotation, info),
        )
        if nested is ModelRef:
            yield from _rows(nested, path)
        elif origin is dict and _section_of(get_args(child)[1]) is not None:
            yield from _rows(get_args(child)[1], [*path, "<name>"])
        elif origin is list and _section_of(get_args(child)[0]) is not None:
            yield from _rows(get_args(child)[0], [*path, "<n>"])


def _secret(path: list[str]) -> bool:
    probe = [seg if not seg.startswith("<") else "x" for seg in path]
    return is_secret(probe) or (is_secret([*probe, "x"]) and path[-1] in ("apiKeys", "headers"))


def reference_rows() -> list[Row]:
    """Every key of the schema, depth first, as the configuration reference lists it."""
    return list(_rows(Configuration, []))


def default_text(value: Any) -> str:
    if value is None:
        return "—"
    return json.dumps(value, ensure_ascii=False)

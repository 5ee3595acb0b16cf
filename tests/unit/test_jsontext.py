"""The prepared JSON encoders and the direct decoder (orbital.protocol.jsontext) against the standard functions."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from orbital.protocol.jsontext import compact, loads

VALUES: list[Any] = [
    {"type": "res", "id": "r1", "ok": True, "payload": {"result": {"x": 1}}},
    {"a": [1.5, None, True, False, "é\ud800x", '\n"\\'], "b": {"c": float("nan"), "d": 10**30, "e": -0.0}},
    {"nested": [[[]], {}, [{"k": "v"}]], "emoji": "🛰", "int": 7},
    "plain",
    "é",
    [],
    {},
    3,
    2.5,
    None,
]


@pytest.mark.parametrize("ascii_only", [True, False])
def test_the_text_is_the_standard_encoders(ascii_only: bool) -> None:
    encode = compact(ensure_ascii=ascii_only)
    for value in VALUES:
        assert encode(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=ascii_only), value


def test_the_encoder_refuses_what_the_standard_one_refuses() -> None:
    encode = compact(ensure_ascii=False)
    with pytest.raises(TypeError):
        encode({"when": object()})
    with pytest.raises(TypeError):
        encode({("a", "b"): 1})
    assert encode({1: "x", 2.5: "y", None: "z"}) == json.dumps({1: "x", 2.5: "y", None: "z"}, separators=(",", ":"))


def _outcome(parse: Any, text: str) -> tuple[str, str]:
    try:
        return "value", json.dumps(parse(text))
    except ValueError as exc:
        return "error", str(exc)


def test_loads_reads_what_json_loads_reads_and_fails_where_it_fails() -> None:
    texts = [compact(ensure_ascii=False)(v) for v in VALUES[:3]]
    texts += ["", " {}", "{} ", "{", "[1,]", "nul", "NaN", '"\\ud800"', "[1] [2]", '{"a":1}x']
    for text in texts:
        assert _outcome(loads, text) == _outcome(json.loads, text), text


@pytest.mark.parametrize("missing", [True, False])
def test_without_the_c_encoder_and_scanner_the_standard_functions_serve(
    monkeypatch: pytest.MonkeyPatch, missing: bool
) -> None:
    """A Python without json's C accelerator, or with one that takes other arguments than the ones used here."""
    from json import encoder

    from orbital.protocol import jsontext

    def other_signature(*args: Any) -> Any:
        raise TypeError("takes other arguments")

    make = None if missing else other_signature
    monkeypatch.setattr(
        jsontext,
        "encoder",
        SimpleNamespace(
            c_make_encoder=make,
            encode_basestring=encoder.encode_basestring,
            encode_basestring_ascii=encoder.encode_basestring_ascii,
        ),
    )
    monkeypatch.setattr(jsontext, "scanner", SimpleNamespace(c_make_scanner=make))
    assert jsontext._scanner() is None
    for ascii_only in (True, False):
        encode = compact(ensure_ascii=ascii_only)
        for value in VALUES:
            assert encode(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=ascii_only), value

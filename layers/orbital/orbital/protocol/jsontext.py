"""Compact JSON text for what the gateway writes on every request: frames, posts and the table's `d` attribute.

`json.JSONEncoder(...).encode` builds the C encoder again for every value it encodes (its markers, its options),
which costs more than encoding a frame of a few hundred bytes (7 us against 3 here); `json.loads` walks two Python
functions before the C scanner. `compact` builds the encoder once and `loads` calls the scanner directly. The text
is the same as `json.dumps(value, separators=(",", ":"), ensure_ascii=...)` gives, with one difference: a value
that contains itself raises RecursionError instead of ValueError (nothing the gateway encodes can). The C encoder and
scanner are the ones `json` itself uses but does not document: where they are missing, or take other arguments than
here, the standard functions are used.

orjson is not used here (ADR 0034): its text differs from `json.dumps` for values a frame may carry (`1e-05` is
`0.00001`, NaN is `null`, an integer past 64 bits or a lone surrogate is an error, there is no ASCII-only mode), and
`orjson.loads` reads an integer past 64 bits as a float.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json import decoder, encoder, scanner
from typing import Any


def compact(*, ensure_ascii: bool) -> Callable[[Any], str]:
    """`json.dumps(value, separators=(",", ":"), ensure_ascii=ensure_ascii)` as one prepared function."""
    standard = json.JSONEncoder(separators=(",", ":"), ensure_ascii=ensure_ascii)
    make = getattr(encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython always has it
        return standard.encode
    strings = encoder.encode_basestring_ascii if ensure_ascii else encoder.encode_basestring
    try:
        prepared = make(None, standard.default, strings, None, ":", ",", False, False, True)
    except TypeError:  # another Python's C encoder, with other arguments
        return standard.encode

    def encode(value: Any) -> str:
        if isinstance(value, str):
            return strings(value)
        return "".join(prepared(value, 0))

    return encode


def _scanner() -> Callable[[str, int], tuple[Any, int]] | None:
    make = getattr(scanner, "c_make_scanner", None)
    if make is None:  # pragma: no cover - CPython always has it
        return None
    try:
        scan: Callable[[str, int], tuple[Any, int]] = make(decoder.JSONDecoder())
    except TypeError:  # another Python's C scanner, with other arguments
        return None
    return scan


_scan = _scanner()


def loads(text: str) -> Any:
    """`json.loads(text)` for the compact text written above (no whitespace around it); anything else, and every
    error, goes through `json.loads` itself."""
    if _scan is not None:
        try:
            value, end = _scan(text, 0)
        except (StopIteration, ValueError):
            return json.loads(text)
        if end == len(text):
            return value
    return json.loads(text)

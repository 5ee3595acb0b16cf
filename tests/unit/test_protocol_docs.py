"""docs/protocol.md as `make docs` renders it: every type a table names is defined in the document."""

from __future__ import annotations

import re

from orbital.methods import docs

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LINK = re.compile(r"\[([^\]]+)\]\(#([^)]+)\)")


def _type_cells(text: str) -> list[str]:
    """The type column of every field table (the tables headed `| field | type | … |`)."""
    cells = []
    in_fields = False
    for line in text.splitlines():
        if line.startswith("| field | type |"):
            in_fields = True
        elif not line.startswith("|"):
            in_fields = False
        elif in_fields and line.startswith("| `"):
            cells.append(line.split(" | ")[1])
    return cells


def _defined(text: str) -> set[str]:
    types = text.split("\n## Types\n", 1)
    assert len(types) == 2, "the document has no Types section"
    section = types[1].split("\n## ", 1)[0]
    return set(re.findall(r"^### (\S+)$", section, flags=re.M))


def test_every_type_a_table_names_is_defined() -> None:
    text = docs.render()
    defined = _defined(text)
    cells = _type_cells(text)
    assert cells, "no field tables found"
    named: set[str] = set()
    for cell in cells:
        plain = LINK.sub(lambda m: m.group(1), cell)
        named |= {word for word in NAME.findall(plain) if word != "of"}
    undefined = sorted(named - docs.PRIMITIVES - defined)
    assert not undefined, f"types named in docs/protocol.md without a definition: {undefined}"
    assert {"ClientInfo", "AuthInfo"} <= defined


def test_every_link_to_a_type_has_its_entry() -> None:
    text = docs.render()
    anchors = {name.lower() for name in _defined(text)}
    targets = {target for cell in _type_cells(text) for _, target in LINK.findall(cell)}
    assert targets, "the tables link no type"
    assert targets <= anchors, sorted(targets - anchors)


def test_a_type_entry_lists_its_fields() -> None:
    text = docs.render()
    entry = text.split("\n### ClientInfo\n", 1)[1].split("\n### ", 1)[0]
    assert "| `id` |" in entry and "| `mode` |" in entry, entry

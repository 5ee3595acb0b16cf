"""Ids the gateway makes on its hot paths (orbital.domain.ids)."""

from __future__ import annotations

import uuid

from orbital.domain.ids import new_uuid


def test_new_uuid_is_a_random_version_4_uuid_in_its_usual_text() -> None:
    made = [new_uuid() for _ in range(2000)]
    assert len(set(made)) == len(made)
    for text in made:
        parsed = uuid.UUID(text)
        assert str(parsed) == text  # lower-case, hyphenated, 36 characters
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
    # every variant digit occurs (8, 9, a, b): the random bits under the variant are kept
    assert {text[19] for text in made} == set("89ab")

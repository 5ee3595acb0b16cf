"""Ids the gateway makes on its hot paths, and sender ids in phone-number form (orbital.domain.ids)."""

from __future__ import annotations

import uuid

import pytest
from orbital.domain import pairing, session_keys
from orbital.domain.ids import new_uuid, normalize_e164


def test_new_uuid_is_a_random_version_4_uuid_in_its_usual_text() -> None:
    made = [new_uuid() for _ in range(2000)]
    assert len(set(made)) == len(made)
    for text in made:
        parsed = uuid.UUID(text)
        assert str(parsed) == text  # lower-case, hyphenated, 36 characters
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
    # every variant digit occurs (8, 9, a, b): the random bits under the variant are kept
    assert {text[19] for text in made} == set("89ab")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("31628552611:0@s.whatsapp.net", "+31628552611"),
        ("31628552611@c.us", "+31628552611"),
        ("12345@c.us", "12345"),
        ("+1 (555) 010-0100:3", "+15550100100"),
        ("  +44 20 7946 0958  ", "+442079460958"),
        ("+1", "+1"),
        ("123456789", "123456789"),
        ("1234567890", "+1234567890"),
        ("bob@c.us.example", ""),
        ("alice", ""),
        ("", ""),
        (None, ""),
        (True, ""),
        (31628552611, "+31628552611"),
        (12345, "12345"),
    ],
)
def test_normalize_e164(raw: object, expected: str) -> None:
    assert normalize_e164(raw) == expected
    assert normalize_e164(normalize_e164(raw)) == expected


def test_pairing_and_session_routing_share_one_normalization() -> None:
    assert pairing.normalize_e164 is normalize_e164
    assert session_keys.normalize_e164 is normalize_e164

"""Sender ids and the channel sender policy (spec §12.1, fix F7: no configured dmPolicy means pairing)."""

from __future__ import annotations

import pytest
from orbital.domain import config as cfg
from orbital.domain.pairing import (
    channel_policy,
    is_allowed_sender,
    normalize_e164,
    normalize_sender,
    pair_key,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("31628552611", "+31628552611"),
        ("31628552611:0@s.whatsapp.net", "+31628552611"),
        ("55156188147823@lid", "+55156188147823"),
        ("+31 (6) 28-55-2611", "+31628552611"),
        ("31628552611@c.us", "+31628552611"),
        ("31628552611:12", "+31628552611"),
        ("", ""),
        (None, ""),
        ("alice", ""),
        ("12345", "12345"),
        ("+12345", "+12345"),
        ("123456789", "123456789"),
        ("1234567890", "+1234567890"),
        ("1081234567890123456", "+1081234567890123456"),
    ],
)
def test_normalize_e164(raw, expected):
    assert normalize_e164(raw) == expected


def test_normalize_e164_is_idempotent():
    for raw in ("31628552611:0@s.whatsapp.net", "12345", "+1 555 0100", "55156188147823@lid"):
        once = normalize_e164(raw)
        assert normalize_e164(once) == once


def test_sender_identity_keeps_ids_without_digits():
    assert normalize_sender("31628552611@s.whatsapp.net") == "+31628552611"
    assert normalize_sender("  alice ") == "alice"
    assert normalize_sender("") == ""
    assert pair_key("whatsapp", "31628552611:3@s.whatsapp.net") == "whatsapp:+31628552611"
    assert pair_key("test", "alice") == "test:alice"


def config_with(channels: dict) -> dict:
    return cfg.effective({"channels": channels})


def test_every_channel_defaults_to_pairing():
    config = cfg.effective({})
    for channel in (*config["channels"], "discord", "telegram", "whatsapp", "signal", "anything"):
        assert channel_policy(config, channel) == "pairing"
        decision = is_allowed_sender(config, channel, "1081234567890123456", "1081234567890123456")
        assert (decision.allowed, decision.needs_pairing) == (False, True)
    decision = is_allowed_sender(config, "whatsapp", "31628552611@s.whatsapp.net", "31628552611@s.whatsapp.net")
    assert decision.reason == "Sender +31628552611 needs pairing approval"
    assert not any(entry.get("dmPolicy") == "open" for entry in config["channels"].values())


def test_only_the_owner_opens_a_channel():
    opened = config_with({"discord": {"dmPolicy": "open"}})
    assert is_allowed_sender(opened, "discord", "1081234567890123456", "1081234567890123456").allowed
    unset = config_with({"discord": {"dmPolicy": None}})
    assert channel_policy(unset, "discord") == "pairing"


def test_unknown_channel_defaults_to_pairing():
    decision = is_allowed_sender(cfg.effective({}), "telegram", "12345", "12345")
    assert (decision.allowed, decision.needs_pairing) == (False, True)
    assert decision.reason == "Sender 12345 needs pairing approval"


def test_channel_entry_without_dm_policy_is_pairing():
    config = config_with({"signal": {"allowFrom": ["+15550100999"]}})
    assert channel_policy(config, "signal") == "pairing"
    assert is_allowed_sender(config, "signal", "15550100999", "15550100999").allowed
    other = is_allowed_sender(config, "signal", "15550100111", "15550100111")
    assert other.needs_pairing and not other.allowed


def test_open_policy_and_wildcard():
    assert is_allowed_sender(config_with({"x": {"dmPolicy": "open"}}), "x", "anyone", "anyone").allowed
    wildcard = config_with({"whatsapp": {"allowFrom": ["*"]}})
    assert is_allowed_sender(wildcard, "whatsapp", "31628552611", "31628552611").allowed


def test_allow_from_matches_normalized_numbers():
    config = config_with({"whatsapp": {"allowFrom": ["+31 6 2855 2611"]}})
    assert is_allowed_sender(config, "whatsapp", "31628552611:7@s.whatsapp.net", "group@g.us").allowed
    assert not is_allowed_sender(config, "whatsapp", "31628552612", "31628552612").allowed


def test_allow_from_matches_raw_peer_id_for_groups():
    config = config_with({"whatsapp": {"allowFrom": ["120363000000@g.us"]}})
    assert is_allowed_sender(config, "whatsapp", "31628552611", "120363000000@g.us").allowed
    assert not is_allowed_sender(config, "whatsapp", "31628552611", "120363000001@g.us").allowed


def test_allowlist_refuses_without_pairing():
    config = config_with({"whatsapp": {"dmPolicy": "allowlist", "allowFrom": ["+31628552611"]}})
    decision = is_allowed_sender(config, "whatsapp", "4915112345678", "4915112345678")
    assert not decision.allowed
    assert not decision.needs_pairing
    assert decision.reason == "Sender +4915112345678 not in allowFrom list"
    assert is_allowed_sender(config, "whatsapp", "+31628552611", "+31628552611").allowed


def test_non_numeric_sender_can_be_allowed_once_listed():
    config = config_with({"test": {"dmPolicy": "pairing", "allowFrom": []}})
    decision = is_allowed_sender(config, "test", "alice", "room-1")
    assert decision.needs_pairing
    assert decision.reason == "Sender alice needs pairing approval"
    listed = config_with({"test": {"dmPolicy": "pairing", "allowFrom": ["alice"]}})
    assert is_allowed_sender(listed, "test", "alice", "room-1").allowed
    assert not is_allowed_sender(listed, "test", "bob", "room-1").allowed


def test_malformed_allow_from_is_treated_as_empty():
    config = config_with({"whatsapp": {"dmPolicy": "allowlist", "allowFrom": "+31628552611"}})
    assert not is_allowed_sender(config, "whatsapp", "31628552611", "31628552611").allowed

"""Session keys and routing (spec §5.1; every row of §15.2 plus the edges around them)."""

from __future__ import annotations

import pytest
from orbital.domain import config as cfg
from orbital.domain.session_keys import (
    agent_id_from_session_key,
    build_agent_session_key,
    canonicalize_session_key,
    canonicalize_with_config,
    is_main_session_key,
    normalize_account_id,
    normalize_agent_id,
    normalize_e164,
    normalize_main_key,
    normalize_token,
    parse_session_key,
    resolve_agent_id_from_binding,
    resolve_agent_main_session_key,
    resolve_linked_identity,
    session_agent_id,
    session_key_for_peer,
)

# --- §15.2 ---------------------------------------------------------------------------------------------------


def test_resolve_agent_main_session_key_normalizes_both_parts():
    assert resolve_agent_main_session_key("Ops", "Primary") == "agent:ops:primary"


def test_agent_id_from_session_key():
    assert agent_id_from_session_key("agent:work:main") == "work"
    assert agent_id_from_session_key("main", "ops") == "ops"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            "agent:main:whatsapp:dm:+12345",
            {"agentId": "main", "channel": "whatsapp", "peer": {"kind": "dm", "id": "+12345"}},
        ),
        ("agent:main:dm:+12345", {"agentId": "main", "peer": {"kind": "dm", "id": "+12345"}}),
        (
            "agent:main:whatsapp:phone-1:dm:+12345",
            {"agentId": "main", "channel": "whatsapp", "accountId": "phone-1", "peer": {"kind": "dm", "id": "+12345"}},
        ),
        (
            "agent:main:whatsapp:group:my-group",
            {"agentId": "main", "channel": "whatsapp", "peer": {"kind": "group", "id": "my-group"}},
        ),
    ],
)
def test_parse_session_key(raw, expected):
    parsed = parse_session_key(raw)
    assert parsed is not None
    assert parsed.as_dict() == expected


@pytest.mark.parametrize("raw", ["main", "agent:main:main", "agent:ops:primary"])
def test_parse_session_key_rejects_aliases_and_short_keys(raw):
    assert parse_session_key(raw) is None


def test_build_agent_session_key_dm_scope_main_collapses():
    key = build_agent_session_key(
        agent_id="main",
        channel="whatsapp",
        account_id="default",
        peer_kind="dm",
        peer_id="+12345",
        dm_scope="main",
        main_key="main",
    )
    assert key == "agent:main:main"


def test_build_agent_session_key_per_account_channel_peer():
    key = build_agent_session_key(
        agent_id="main",
        channel="whatsapp",
        account_id="phone-1",
        peer_kind="dm",
        peer_id="+12345",
        dm_scope="per-account-channel-peer",
    )
    assert key == "agent:main:whatsapp:phone-1:dm:+12345"


@pytest.mark.parametrize(
    ("raw", "opts", "expected"),
    [
        ("main", {"main_key": "primary", "default_agent_id": "main"}, "agent:main:primary"),
        ("agent:main:main", {"main_key": "primary"}, "agent:main:primary"),
        ("agent:main:cli:dm:main", {"main_key": "main", "dm_scope": "main"}, "agent:main:main"),
        ("agent:main:whatsapp:dm:+12345", {"main_key": "main", "dm_scope": "main"}, "agent:main:main"),
        ("agent:main:dm:+12345", {"main_key": "main", "dm_scope": "main"}, "agent:main:main"),
        (
            "agent:main:whatsapp:dm:+12345",
            {"main_key": "main", "dm_scope": "per-channel-peer"},
            "agent:main:whatsapp:dm:+12345",
        ),
        ("custom-key", {"main_key": "main"}, "custom-key"),
    ],
)
def test_canonicalize_session_key(raw, opts, expected):
    assert canonicalize_session_key(raw, **opts) == expected


@pytest.mark.parametrize(
    ("key", "main_key", "dm_scope", "expected"),
    [
        ("agent:main:primary", "primary", "main", True),
        ("agent:main:whatsapp:dm:+12345", "primary", "main", True),
        ("agent:main:cli:dm:main", "main", "main", True),
        ("agent:main:whatsapp:dm:+12345", "primary", "per-channel-peer", False),
    ],
)
def test_is_main_session_key(key, main_key, dm_scope, expected):
    assert is_main_session_key(key, main_key=main_key, dm_scope=dm_scope) is expected


# --- normalizers ---------------------------------------------------------------------------------------------


def test_normalize_agent_and_account_ids():
    assert normalize_agent_id(None) == "main"
    assert normalize_agent_id("  ") == "main"
    assert normalize_agent_id("Work_1") == "work_1"
    assert normalize_agent_id("My Agent!") == "my-agent"
    assert normalize_agent_id("!!!") == "main"
    assert normalize_agent_id("-x" + "a" * 80) == "x" + "a" * 63
    assert normalize_account_id("") == "default"
    assert normalize_account_id("Phone 1") == "phone-1"


def test_normalize_main_key():
    assert normalize_main_key(None) == "main"
    assert normalize_main_key("  Primary ") == "primary"


def test_normalize_token():
    assert normalize_token("") == "unknown"
    assert normalize_token("  ", "dm") == "dm"
    assert normalize_token("WhatsApp") == "whatsapp"
    assert normalize_token("+1 (555) 0100") == "+1_555_0100"
    assert normalize_token("a:b::c") == "a_b_c"
    assert normalize_token("user@example.com") == "user@example.com"


# --- canonicalization edges ---------------------------------------------------------------------------------------


def test_canonical_keys_of_the_stock_clients_collapse_to_main():
    for alias in ("agent:main:web:dm:local", "agent:main:cli:dm:main", "main", " MAIN ", "agent:main:MAIN"):
        assert canonicalize_session_key(alias) == "agent:main:main"


def test_canonicalize_main_alias_uses_the_default_agent():
    assert canonicalize_session_key("main", default_agent_id="Ops") == "agent:ops:main"
    assert canonicalize_session_key("primary", main_key="Primary", default_agent_id="ops") == "agent:ops:primary"


def test_canonicalize_leaves_unparseable_and_foreign_keys_alone():
    assert canonicalize_session_key("") == ""
    assert canonicalize_session_key("   ") == ""
    assert canonicalize_session_key("agent:main:cron:job-1") == "agent:main:cron:job-1"
    assert canonicalize_session_key("agent:main:heartbeat:system:internal") == "agent:main:heartbeat:system:internal"
    assert canonicalize_session_key("agent:main:other") == "agent:main:other"
    assert canonicalize_session_key("  test-session ") == "test-session"


def test_canonicalize_normalizes_structured_keys():
    assert canonicalize_session_key("agent:Main:WhatsApp:Group:My-Group") == "agent:main:whatsapp:group:my-group"
    assert (
        canonicalize_session_key("agent:main:Discord:dm:a:b", dm_scope="per-channel-peer")
        == "agent:main:discord:dm:a_b"
    )
    assert canonicalize_session_key("agent:main:dm:+1", dm_scope="per-channel-peer") == "agent:main:unknown:dm:+1"
    assert (
        canonicalize_session_key("agent:main:wa:dm:+1", dm_scope="per-account-channel-peer")
        == "agent:main:wa:default:dm:+1"
    )
    assert canonicalize_session_key("agent:main:wa:acc:dm:+1", dm_scope="per-peer") == "agent:main:dm:+1"


def test_heartbeat_and_cron_sessions_are_not_main():
    assert not is_main_session_key("agent:main:heartbeat:system:internal")
    assert not is_main_session_key("agent:main:cron:job-1")
    assert not is_main_session_key("")
    assert is_main_session_key("main")


def test_canonicalize_with_config():
    config = cfg.effective(
        {"session": {"mainKey": "home", "dmScope": "per-peer"}, "agents": {"list": [{"id": "Ops", "default": True}]}}
    )
    assert canonicalize_with_config("main", config) == "agent:ops:home"
    assert canonicalize_with_config("agent:main:web:dm:Local", config) == "agent:main:dm:local"
    assert canonicalize_with_config("agent:main:web:dm:local", cfg.defaults()) == "agent:main:main"


def test_session_agent_id():
    assert session_agent_id("agent:work:main") == "work"
    assert session_agent_id("test-session") == "main"
    assert session_agent_id("agent::x") == "main"


# --- identity links and bindings ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", ""),
        ("31628552611", "+31628552611"),
        ("31628552611:0@s.whatsapp.net", "+31628552611"),
        ("55156188147823@lid", "+55156188147823"),
        ("+31 (6) 28-55-2611", "+31628552611"),
        ("12345@c.us", "12345"),
        ("+1", "+1"),
        ("alice", ""),
    ],
)
def test_normalize_e164(raw, expected):
    assert normalize_e164(raw) == expected


LINKS = {
    "steve": ["+31628552611", "telegram:123456789", "WhatsApp:+34675706329"],
    "ann": ["discord:ann_99"],
}


def test_identity_links():
    assert resolve_linked_identity(LINKS, "whatsapp", "31628552611@s.whatsapp.net") == "steve"
    assert resolve_linked_identity(LINKS, "discord", "+31628552611") == "steve"
    assert resolve_linked_identity(LINKS, "Telegram", "123456789") == "steve"
    assert resolve_linked_identity(LINKS, "whatsapp", "34675706329") == "steve"
    assert resolve_linked_identity(LINKS, "telegram", "34675706329") is None
    assert resolve_linked_identity(LINKS, "discord", "ann_99") == "ann"
    assert resolve_linked_identity(LINKS, "discord", "bob") is None
    assert resolve_linked_identity({}, "whatsapp", "+31628552611") is None
    assert resolve_linked_identity(None, "whatsapp", "+31628552611") is None


def test_session_key_for_peer_applies_links_to_dm_and_group_keys():
    config = cfg.effective({"session": {"identityLinks": LINKS, "dmScope": "per-peer"}})
    dm = session_key_for_peer(config, agent_id="main", channel="whatsapp", peer_kind="dm", peer_id="31628552611")
    assert dm == "agent:main:dm:steve"
    group = session_key_for_peer(
        config, agent_id="main", channel="whatsapp", peer_kind="group", peer_id="g1", sender_id="+31628552611"
    )
    assert group == "agent:main:whatsapp:group:steve"
    other = session_key_for_peer(
        config, agent_id="main", channel="whatsapp", peer_kind="group", peer_id="G:1", sender_id="+999"
    )
    assert other == "agent:main:whatsapp:group:g_1"
    collapsed = session_key_for_peer(cfg.defaults(), agent_id="main", channel="whatsapp", peer_kind="dm", peer_id="x")
    assert collapsed == "agent:main:main"


def test_agent_binding_resolution():
    config = cfg.effective(
        {
            "agents": {
                "list": [{"id": "home", "default": True}],
                "bindings": [
                    {"agentId": "work", "match": {"channel": "discord", "peer": {"kind": "group"}}},
                    {"agentId": "phone", "match": {"channel": "whatsapp", "accountId": "biz"}},
                    {"agentId": "vip", "match": {"peer": {"id": "+1555"}}},
                ],
            }
        }
    )
    assert resolve_agent_id_from_binding(config, channel="discord", peer_kind="group", peer_id="g") == "work"
    assert resolve_agent_id_from_binding(config, channel="discord", peer_kind="dm", peer_id="u") == "home"
    assert resolve_agent_id_from_binding(config, channel="whatsapp", account_id="biz") == "phone"
    assert resolve_agent_id_from_binding(config, channel="whatsapp", account_id="Biz") == "home"
    assert resolve_agent_id_from_binding(config, channel="x", peer_kind="dm", peer_id="+1555") == "vip"
    assert resolve_agent_id_from_binding(config, channel="x") == "home"
    assert resolve_agent_id_from_binding(cfg.defaults(), channel="x") == "main"

"""`orbital mcp`'s pure parts: what `add` writes, the usage errors (exit 2 before any connection) and how a server's
text is made safe for a terminal."""

from __future__ import annotations

import argparse

import pytest
from orbital.cli import mcp
from orbital.cli.main import build_parser, main


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["mcp", *argv])


def test_add_writes_every_option_in_the_config_shape() -> None:
    args = parse(
        "add",
        "docs",
        "https://example.com/mcp",
        "--transport",
        "sse",
        "--header",
        "X-Team: blue",
        "--header-env",
        "Authorization: DOCS_AUTH",
        "--trust",
        "trusted",
        "--allow",
        "search*",
        "--allow",
        "fetch",
        "--deny",
        "search_admin",
        "--timeout-ms",
        "5000",
        "--disabled",
    )
    assert mcp._usage(args) is None
    server = mcp.server_config(args, {"DOCS_AUTH": "Bearer s3cret"})
    assert server == {
        "url": "https://example.com/mcp",
        "transport": "sse",
        "headers": {"X-Team": "blue", "Authorization": "Bearer s3cret"},
        "enabled": False,
        "tools": {"allow": ["search*", "fetch"], "deny": ["search_admin"]},
        "trust": "trusted",
        "timeoutMs": 5000,
    }


def test_add_with_only_a_url_writes_only_the_url() -> None:
    args = parse("add", "docs", "http://127.0.0.1:9/mcp")
    assert mcp.server_config(args, {}) == {"url": "http://127.0.0.1:9/mcp"}


def test_add_oauth_takes_the_client_secret_from_the_environment_only() -> None:
    args = parse(
        "add",
        "hosted",
        "https://example.com/mcp",
        "--oauth",
        "--oauth-scope",
        "read write",
        "--oauth-client-id",
        "abc",
        "--oauth-client-secret-env",
        "HOSTED_SECRET",
    )
    assert mcp.server_config(args, {"HOSTED_SECRET": "shh"})["oauth"] == {
        "scope": "read write",
        "clientId": "abc",
        "clientSecret": "shh",
    }
    assert mcp.server_config(parse("add", "hosted", "https://example.com/mcp", "--oauth"), {})["oauth"] == {}
    with pytest.raises(ValueError, match="HOSTED_SECRET is not set") as caught:
        mcp.server_config(args, {})
    assert "shh" not in str(caught.value)


@pytest.mark.parametrize(
    ("header", "flag", "message"),
    [
        ("Authorization Bearer x", "--header", "'Name: value'"),
        ("Authorization:", "--header", "'Name: value'"),
        ("X.Dotted: v", "--header", "not a header name"),
        ("Authorization: MISSING_VAR", "--header-env", "MISSING_VAR is not set"),
    ],
)
def test_a_malformed_header_is_refused(header: str, flag: str, message: str) -> None:
    args = parse("add", "docs", "https://example.com/mcp", flag, header)
    with pytest.raises(ValueError, match=message):
        mcp.server_config(args, {})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["add", "docs"], "add needs the server's URL"),
        (["add", "my_docs", "https://x/mcp"], "1 to 32 letters, digits and dashes"),
        (["add", "d" * 33, "https://x/mcp"], "1 to 32 letters"),
        (["add", "docs", "ftp://x/mcp"], "http:// or https://"),
        (["add", "docs", "https://x/mcp", "--timeout-ms", "999"], "--timeout-ms is 1000 to 300000"),
        (["add", "docs", "https://x/mcp", "--timeout-ms", "300001"], "--timeout-ms is 1000 to 300000"),
        (["add", "docs", "https://x/mcp", "--oauth-scope", "s"], "go with --oauth"),
        (["add", "docs", "https://x/mcp", "--deny", " "], "--allow and --deny take"),
        (["test"], "test needs the server's NAME"),
        (["login"], "login needs the server's NAME"),
        (["remove", "a.b"], "1 to 32 letters"),
        (["list", "docs"], "list takes no NAME"),
        (["test", "docs", "https://x/mcp"], "takes no URL"),
        (["test", "docs", "--trust", "trusted"], "--trust go with add"),
        (["remove", "docs", "--tools"], "--tools goes with list"),
    ],
)
def test_usage_errors_exit_2_before_connecting(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # the URL is a port nothing listens on: a usage error must come before any connection attempt
    assert main(["mcp", *argv, "--url", "ws://127.0.0.1:9/ws", "--token-file", "/nonexistent"]) == 2
    assert message in capsys.readouterr().err


def test_refresh_without_a_name_is_fine() -> None:
    assert mcp._usage(parse("refresh")) is None
    assert mcp._usage(parse()) is None  # list


def test_a_servers_text_cannot_drive_the_terminal() -> None:
    hostile = "ok\x1b[2J\x1b]0;pwned\x07\r\nnext\u202eline\x9b31m"
    cleaned = mcp.clean(hostile)
    assert "\x1b" not in cleaned and "\x07" not in cleaned and "\r" not in cleaned and "\n" not in cleaned
    assert "\u202e" not in cleaned and "\x9b" not in cleaned
    assert cleaned.startswith("ok?[2J?]0;pwned?")
    assert len(mcp.clean("x" * 1000, 50)) == 50


def test_a_header_without_a_colon_is_not_echoed() -> None:
    args = parse("add", "docs", "https://example.com/mcp", "--header", "Bearer s3cret-value")
    with pytest.raises(ValueError) as caught:
        mcp.server_config(args, {})
    assert "s3cret" not in str(caught.value)


def test_login_sends_the_gateways_own_callback() -> None:
    from orbital.tools.mcp_oauth import CALLBACK_PATH

    assert mcp.CALLBACK_PATH == CALLBACK_PATH
    assert mcp.redirect_uri("ws://127.0.0.1:8765/ws", None) == "http://127.0.0.1:8765/api/mcp/oauth/callback"
    assert (
        mcp.redirect_uri("wss://abc.execute-api.eu-west-1.amazonaws.com/prod", "https://def.example.com/")
        == "https://def.example.com/api/mcp/oauth/callback"
    )
    assert mcp.redirect_uri("wss://abc.example.com/prod", None) is None  # the gateway says what it needs
    assert mcp._usage(parse("list", "--http-url", "https://x")) == "--http-url goes with login"

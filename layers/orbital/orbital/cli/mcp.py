"""`orbital mcp`: the remote MCP servers whose tools the agent may call.

- `orbital mcp [list] [--tools]`: every configured server (`mcp.list`, from the gateway's cache: it does not connect)
  with its status, tool count, trust, auth state and last error; `--tools` adds each server's tools.
- `orbital mcp add NAME URL [--transport sse] [--header 'K: V'] [--header-env 'K: VAR'] [--trust trusted]
  [--allow P] [--deny P] [--timeout-ms N] [--oauth …] [--disabled]`: writes `mcp.servers.NAME` with `config.set`
  (header values and the OAuth client secret are secrets: masked on every read, and setting them needs an admin
  token), then tests it (`mcp.test`) unless `--no-test`.
- `orbital mcp test NAME`: connect now, list the tools, report (`mcp.test`; exit 1 when the server fails).
- `orbital mcp refresh [NAME]`: list the tools again, of one server or all (`mcp.refresh`).
- `orbital mcp login NAME [--http-url URL]`: the URL to open to authorize the gateway at a server that needs a login
  (`mcp.login`); the server's authorization server sends the browser back to the gateway's HTTP API
  (`/api/mcp/oauth/callback`), told from `--url` or given with `--http-url` (AWS).
- `orbital mcp enable NAME` / `disable NAME`: `mcp.servers.NAME.enabled`.
- `orbital mcp remove NAME`: deletes `mcp.servers.NAME`.

Everything a server says (its tools' names and descriptions, its errors) is a stranger's text: it is printed with
control characters replaced, so it cannot move the cursor or recolour the terminal.

Exit status: 0 done, 1 an error (the gateway unreachable or refusing, an unknown server, a test that failed), 2 a
usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any

from orbital.cli import gateway
from orbital.protocol import device_token, local_token

PROG = "orbital mcp"
ACTIONS = ("list", "add", "test", "refresh", "login", "enable", "disable", "remove")
NAME = re.compile(r"^[A-Za-z0-9-]{1,32}$")
HEADER_NAME = re.compile(r"^[!#$%&'*+^_`|~0-9A-Za-z-]+$")
"""A header's name: an HTTP token without dots (a dot would split the config path)."""
TRANSPORTS = ("streamable-http", "sse")
TRUSTS = ("untrusted", "trusted")
MIN_TIMEOUT_MS = 1_000
MAX_TIMEOUT_MS = 300_000
CALLBACK_PATH = "/api/mcp/oauth/callback"
"""Where the server's authorization server sends the browser back to: the gateway's HTTP API."""
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `mcp` subcommand on an argparse subparsers object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "mcp",
        help="list, add, test, log in to or remove the remote MCP servers the agent uses",
        description=(
            "Without an action (or with `list`): the configured MCP servers with their status, tool count, trust, "
            "auth state and last error (--tools: and their tools). `add NAME URL`: configure a server "
            "(mcp.servers.NAME) and test it. `test NAME`: connect now and list its tools. `refresh [NAME]`: list "
            "tools again. `login NAME`: print the URL that authorizes the gateway at a server that needs a login. "
            "`enable`/`disable NAME`, `remove NAME`. A server's tools reach the model as mcp__NAME__TOOL. Exit 1 on "
            "an error (or a failed test), 2 on a usage error."
        ),
    )
    parser.add_argument("action", nargs="?", default="list", choices=ACTIONS, help="list (default), add, test, …")
    parser.add_argument("name", nargs="?", default=None, metavar="NAME", help="the server's name (letters, digits, -)")
    parser.add_argument("server_url", nargs="?", default=None, metavar="URL", help="add: the server's http(s) URL")
    parser.add_argument("--transport", default=None, choices=TRANSPORTS, help="add: default streamable-http")
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'K: V'",
        help="add: an HTTP header sent on every request (repeatable; a secret: prefer --header-env)",
    )
    parser.add_argument(
        "--header-env",
        action="append",
        default=[],
        metavar="'K: VAR'",
        help="add: a header whose value is read from environment variable VAR (kept off the command line)",
    )
    parser.add_argument("--trust", default=None, choices=TRUSTS, help="add: untrusted (default) taints the run")
    parser.add_argument("--allow", action="append", default=[], metavar="PATTERN", help="add: offer only these tools")
    parser.add_argument("--deny", action="append", default=[], metavar="PATTERN", help="add: never offer these tools")
    parser.add_argument("--timeout-ms", type=int, default=None, metavar="MS", help="add: per call (default 30000)")
    parser.add_argument("--oauth", action="store_true", help="add: the server needs a login (OAuth)")
    parser.add_argument("--oauth-scope", default=None, metavar="SCOPE", help="add --oauth: the scope to ask for")
    parser.add_argument("--oauth-client-id", default=None, metavar="ID", help="add --oauth: a registered client id")
    parser.add_argument(
        "--oauth-client-secret-env",
        default=None,
        metavar="VAR",
        help="add --oauth: read the registered client's secret from environment variable VAR",
    )
    parser.add_argument("--disabled", action="store_true", help="add: configure it switched off")
    parser.add_argument("--replace", action="store_true", help="add: replace a server of the same name")
    parser.add_argument("--no-test", action="store_true", help="add: do not test the server after adding it")
    parser.add_argument(
        "--http-url",
        default=None,
        metavar="URL",
        help="login: the gateway's HTTP API, where the login comes back to, when its host differs from --url's (AWS)",
    )
    parser.add_argument("--tools", action="store_true", help="list: each server's tools too")
    parser.add_argument("--json", action="store_true", help="print the gateway's answer as JSON")
    local_token.add_arguments(parser, token_argument=False)
    parser.add_argument("--timeout", type=float, default=60.0, metavar="S", help="RPC timeout (default 60)")
    parser.set_defaults(func=run)
    return parser


def clean(value: Any, limit: int = 300) -> str:
    """A server's text for one terminal line: control and direction characters replaced, cut at `limit`."""
    text = CONTROL.sub("?", " ".join(str(value).split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- usage ------------------------------------------------------------------------------------------------------

ADD_ONLY = (
    ("--transport", "transport"),
    ("--header", "header"),
    ("--header-env", "header_env"),
    ("--trust", "trust"),
    ("--allow", "allow"),
    ("--deny", "deny"),
    ("--timeout-ms", "timeout_ms"),
    ("--oauth", "oauth"),
    ("--oauth-scope", "oauth_scope"),
    ("--oauth-client-id", "oauth_client_id"),
    ("--oauth-client-secret-env", "oauth_client_secret_env"),
    ("--disabled", "disabled"),
    ("--replace", "replace"),
    ("--no-test", "no_test"),
)


def _usage(args: argparse.Namespace) -> str | None:
    """What is wrong with the combination of arguments, if anything."""
    given = [flag for flag, attr in ADD_ONLY if getattr(args, attr) not in (None, False, [])]
    if args.action != "add" and given:
        return f"{', '.join(given)} go with add"
    if args.tools and args.action != "list":
        return "--tools goes with list"
    if args.http_url is not None and args.action != "login":
        return "--http-url goes with login"
    if args.action != "add" and args.server_url is not None:
        return f"{args.action} takes no URL (got {args.server_url!r})"
    if args.action == "list":
        return f"list takes no NAME (got {args.name!r})" if args.name is not None else None
    if args.action == "refresh" and args.name is None:
        return None
    if args.name is None:
        return f"{args.action} needs the server's NAME (`{PROG}` lists them)"
    if not NAME.fullmatch(args.name):
        return f"a server's name is 1 to 32 letters, digits and dashes (got {args.name!r})"
    if args.action != "add":
        return None
    if not args.server_url:
        return "add needs the server's URL, e.g. `orbital mcp add docs https://example.com/mcp`"
    if not re.match(r"^https?://[^/\s]+", args.server_url):
        return f"the server's URL is http:// or https:// (got {args.server_url!r})"
    if args.timeout_ms is not None and not MIN_TIMEOUT_MS <= args.timeout_ms <= MAX_TIMEOUT_MS:
        return f"--timeout-ms is {MIN_TIMEOUT_MS} to {MAX_TIMEOUT_MS}"
    oauth_parts = args.oauth_scope or args.oauth_client_id or args.oauth_client_secret_env
    if oauth_parts and not args.oauth:
        return "--oauth-scope, --oauth-client-id and --oauth-client-secret-env go with --oauth"
    for pattern in [*args.allow, *args.deny]:
        if not pattern.strip():
            return "--allow and --deny take a tool name or a pattern with *"
    return None


def _header(text: str, flag: str) -> tuple[str, str]:
    """`K: V` as (K, V); ValueError with what is wrong."""
    key, colon, value = text.partition(":")
    key, value = key.strip(), value.strip()
    if not colon:
        raise ValueError(f"{flag} is 'Name: value' (the one given has no ':')")  # never echoed: it may be a secret
    if not key or not value:
        raise ValueError(f"{flag} is 'Name: value' (the one given has no {'name' if not key else 'value'})")
    if not HEADER_NAME.fullmatch(key):
        raise ValueError(f"{flag}: {key!r} is not a header name (letters, digits and -, no dots)")
    return key, value


def server_config(args: argparse.Namespace, environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The `mcp.servers.NAME` object `add` writes; ValueError with what is wrong (a missing environment variable, a
    malformed header). Never includes a secret in the error."""
    env = os.environ if environ is None else environ
    server: dict[str, Any] = {"url": args.server_url.strip()}
    if args.transport:
        server["transport"] = args.transport
    headers: dict[str, str] = {}
    for text in args.header:
        key, value = _header(text, "--header")
        headers[key] = value
    for text in args.header_env:
        key, var = _header(text, "--header-env")
        value = env.get(var, "").strip()
        if not value:
            raise ValueError(f"--header-env {key}: environment variable {var} is not set (or empty)")
        headers[key] = value
    if headers:
        server["headers"] = headers
    if args.disabled:
        server["enabled"] = False
    tools: dict[str, list[str]] = {}
    if args.allow:
        tools["allow"] = [p.strip() for p in args.allow]
    if args.deny:
        tools["deny"] = [p.strip() for p in args.deny]
    if tools:
        server["tools"] = tools
    if args.trust:
        server["trust"] = args.trust
    if args.timeout_ms is not None:
        server["timeoutMs"] = args.timeout_ms
    if args.oauth:
        oauth: dict[str, str] = {}
        if args.oauth_scope:
            oauth["scope"] = args.oauth_scope.strip()
        if args.oauth_client_id:
            oauth["clientId"] = args.oauth_client_id.strip()
        if args.oauth_client_secret_env:
            secret = env.get(args.oauth_client_secret_env, "").strip()
            if not secret:
                raise ValueError(
                    f"--oauth-client-secret-env: environment variable {args.oauth_client_secret_env} "
                    "is not set (or empty)"
                )
            oauth["clientSecret"] = secret
        server["oauth"] = oauth
    return server


# --- run --------------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    problem = _usage(args)
    if problem:
        gateway.error(PROG, problem)
        return 2
    server: dict[str, Any] | None = None
    if args.action == "add":
        try:
            server = server_config(args)
        except ValueError as exc:
            gateway.error(PROG, str(exc))
            return 2
    return gateway.run(PROG, args, "mcp", lambda client, url: _act(client, args, url, server), _refusal)


def _act(client: Any, args: argparse.Namespace, url: str, server: dict[str, Any] | None) -> int:
    if args.action == "login":
        return _login(client, args, url)
    return _ACTIONS[args.action](client, args, server)


def _refusal(code: int, message: str) -> str:
    hint = ""
    if code == 403:
        hint = " (header values and client secrets are secrets: setting them needs an admin token)"
    return f"{clean(message, 1000)} ({code}){hint}"


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def _when(ms: Any) -> str:
    if not isinstance(ms, (int, float)) or isinstance(ms, bool) or ms <= 0:
        return "never"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000))


def _servers(client: Any) -> list[dict[str, Any]]:
    payload = client.call("mcp.list", {})
    servers = payload.get("servers") if isinstance(payload, dict) else None
    return [s for s in servers if isinstance(s, dict)] if isinstance(servers, list) else []


def _configured(client: Any, name: str) -> Any:
    """The server's stored configuration (secrets masked), or None."""
    answer = client.call("config.get", {"path": f"mcp.servers.{name}"})
    if not isinstance(answer, dict) or answer.get("exists") is False:
        return None
    return answer.get("value")


def _unknown(name: str) -> int:
    gateway.error(PROG, f"no MCP server named {name!r} (`{PROG}` lists them; `{PROG} add {name} URL` adds one)")
    return 1


def _tool_lines(tools: Any, indent: str = "  ") -> list[str]:
    lines: list[str] = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        mark = "" if tool.get("allowed", True) else "  (not offered: tools.allow/deny)"
        lines.append(f"{indent}{clean(tool.get('name', '?'), 80)}{mark}")
        description = clean(tool.get("description") or "", 160)
        if description:
            lines.append(f"{indent}    {description}")
    return lines


# --- list -------------------------------------------------------------------------------------------------------


def _list(client: Any, args: argparse.Namespace, _server: Any) -> int:
    servers = _servers(client)
    if args.json:
        _print_json({"servers": servers})
        return 0
    if not servers:
        print(f"No MCP servers. `{PROG} add NAME URL` adds one.")
        return 0
    rows = [("NAME", "STATUS", "TOOLS", "TRUST", "AUTH", "CHECKED", "URL")]
    for s in servers:
        count = s.get("toolCount")
        rows.append(
            (
                clean(s.get("name", "?"), 40),
                clean(s.get("status") or "unknown", 20),
                str(count) if isinstance(count, int) else "-",
                clean(s.get("trust") or "untrusted", 20),
                clean(s.get("auth") or "none", 20),
                _when(s.get("checkedAt")),
                local_token.redact_url(str(s.get("url") or "")),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    problems = [s for s in servers if s.get("lastError") or s.get("auth") == "needs-login"]
    for s in problems:
        name = clean(s.get("name", "?"), 40)
        if s.get("lastError"):
            print(f"{name}: {clean(s['lastError'])}")
        if s.get("auth") == "needs-login" or s.get("status") == "needs-login":
            print(f"{name}: needs a login: `{PROG} login {name}`")
    if args.tools:
        for s in servers:
            print()
            print(f"{clean(s.get('name', '?'), 40)}:")
            lines = _tool_lines(s.get("tools"))
            print("\n".join(lines) if lines else "  (no tools known: `orbital mcp test NAME` lists them)")
    return 0


# --- add --------------------------------------------------------------------------------------------------------


def _add(client: Any, args: argparse.Namespace, server: Any) -> int:
    name = args.name
    if not args.replace and _configured(client, name) is not None:
        gateway.error(PROG, f"a server named {name!r} exists: --replace replaces it, `{PROG} remove {name}` removes it")
        return 1
    answer = client.call("config.set", {"path": f"mcp.servers.{name}", "value": server})
    testing = not (args.no_test or args.disabled or "oauth" in server)
    if args.json and not testing:
        _print_json(answer)
        return 0
    if not args.json:
        shown = local_token.redact_url(server["url"])
        print(f"Added {name} ({shown}): its tools reach the model as mcp__{name}__TOOL.")
        if isinstance(answer, dict) and answer.get("warning"):
            print(f"{PROG}: warning: {clean(answer['warning'])}", file=sys.stderr)
        if "oauth" in server:
            print(f"It needs a login: `{PROG} login {name}` prints the URL to open.")
    if not testing:
        return 0
    result = client.call("mcp.test", {"name": name})
    if args.json:
        _print_json({"set": answer, "test": result})
        return 0
    _report_test(result if isinstance(result, dict) else {}, name)
    return 0  # added, whatever the test says: the report tells what to fix


# --- test / refresh ---------------------------------------------------------------------------------------------


def _report_test(result: dict[str, Any], name: str) -> bool:
    elapsed = result.get("elapsedMs")
    took = f" in {elapsed} ms" if isinstance(elapsed, (int, float)) else ""
    if result.get("ok"):
        count = result.get("toolCount")
        print(f"{name}: ok{took}, {count if isinstance(count, int) else '?'} tools")
        lines = _tool_lines(result.get("tools"))
        if lines:
            print("\n".join(lines))
        return True
    status = clean(result.get("status") or "error", 20)
    print(f"{name}: {status}{took}: {clean(result.get('error') or 'no answer')}", file=sys.stderr)
    if status == "needs-login":
        print(f"`{PROG} login {name}` prints the URL to open.", file=sys.stderr)
    return False


def _test(client: Any, args: argparse.Namespace, _server: Any) -> int:
    result = client.call("mcp.test", {"name": args.name})
    if args.json:
        _print_json(result)
        return 0 if isinstance(result, dict) and result.get("ok") else 1
    return 0 if _report_test(result if isinstance(result, dict) else {}, args.name) else 1


def _refresh(client: Any, args: argparse.Namespace, _server: Any) -> int:
    result = client.call("mcp.refresh", {"name": args.name} if args.name else {})
    if args.json:
        _print_json(result)
        return 0
    servers = result.get("servers") if isinstance(result, dict) else None
    servers = [s for s in servers if isinstance(s, dict)] if isinstance(servers, list) else []
    if not servers:
        print("No MCP servers to refresh.")
        return 0
    for s in servers:
        line = f"{clean(s.get('name', '?'), 40)}: {clean(s.get('status') or '?', 20)}"
        if isinstance(s.get("toolCount"), int):
            line += f", {s['toolCount']} tools"
        if s.get("error"):
            line += f": {clean(s['error'])}"
        print(line)
    return 0


# --- login ------------------------------------------------------------------------------------------------------


def redirect_uri(url: str, http_url: str | None) -> str | None:
    """The gateway's OAuth callback as a browser reaches it, from the WebSocket URL (or `http_url`); None when it
    cannot be told (the gateway then says what it needs)."""
    try:
        _, base = device_token.endpoints(url, http_url)
    except ValueError:
        return None
    return base + CALLBACK_PATH


def _login(client: Any, args: argparse.Namespace, url: str) -> int:
    params: dict[str, Any] = {"name": args.name}
    callback = redirect_uri(url, args.http_url)
    if callback:
        params["redirectUri"] = callback
    result = client.call("mcp.login", params)
    if args.json:
        _print_json(result)
        return 0
    result = result if isinstance(result, dict) else {}
    link = str(result.get("url") or "")
    if not re.match(r"^https?://", link):
        gateway.error(PROG, f"the gateway's answer holds no URL to open (got {clean(link, 80)!r})")
        return 1
    expires = result.get("expiresAt")
    until = f" (valid until {_when(expires)})" if isinstance(expires, (int, float)) else ""
    print(f"Open this URL in a browser to let the gateway use {args.name}{until}:")
    print(f"  {CONTROL.sub('', link)}")
    print(f"Then `{PROG} test {args.name}` checks it.")
    return 0


# --- enable / disable / remove ----------------------------------------------------------------------------------


def _switch(client: Any, args: argparse.Namespace, _server: Any) -> int:
    name = args.name
    if _configured(client, name) is None:
        return _unknown(name)
    on = args.action == "enable"
    answer = client.call("config.set", {"path": f"mcp.servers.{name}.enabled", "value": on})
    if args.json:
        _print_json(answer)
        return 0
    print(f"{name} is {'enabled: its tools are offered' if on else 'disabled: its tools are not offered'}.")
    return 0


def _remove(client: Any, args: argparse.Namespace, _server: Any) -> int:
    name = args.name
    if _configured(client, name) is None:
        return _unknown(name)
    answer = client.call("config.set", {"path": f"mcp.servers.{name}"})
    if args.json:
        _print_json(answer)
        return 0
    print(f"Removed {name}: its tools are no longer offered.")
    return 0


_ACTIONS = {
    "list": _list,
    "add": _add,
    "test": _test,
    "refresh": _refresh,
    "enable": _switch,
    "disable": _switch,
    "remove": _remove,
}

"""`orbital approvals`: the tool calls waiting for the owner's answer, and the answer.

- `orbital approvals [list] [--session KEY]`: the pending approvals (`approval.list`), oldest first, each with its
  tool, its arguments (masked by the gateway), the rule and reason that asked, the run's taint and the time left.
- `orbital approvals approve ID [--session-wide]` / `orbital approvals deny ID`: `approval.resolve`;
  `--session-wide` also allows, for the rest of that session, the calls the same rule would ask about
  (`remember: "session"`).
- `orbital approvals history [--session KEY] [--limit N]`: who decided what, when and from where in a session
  (`approval.history`, newest first).

Exit status: 0 done (a list, even an empty one; a decision that counted), 1 an error (the gateway unreachable or
refusing, an unknown id, a caller that may not answer), 2 a usage error, 3 the approval had already been decided
(by someone else, or by its timeout): what was decided is printed on stderr.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from orbital.cli import gateway
from orbital.cli.chat import approval_lines, args_line
from orbital.protocol import local_token

PROG = "orbital approvals"
ALREADY_DECIDED = 3
"""The exit status of an answer that came after the approval was decided."""
ACTIONS = ("list", "approve", "deny", "history")
DEFAULT_SESSION = "main"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `approvals` subcommand on an argparse subparsers object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "approvals",
        help="list the tool calls waiting for approval, approve or deny one",
        description=(
            "Without an action (or with `list`): the tool calls waiting for an approval, oldest first, in every "
            "session or the one --session names. `approve ID` / `deny ID` answers one; with --session-wide, calls "
            "the same rule would ask about (or, where no rule matched, the same tool with the same arguments) run "
            "without asking for the rest of that session. The first answer counts, wherever it comes from (the "
            "console, a chat's yes/no, Telegram); a later one exits 3 and says who decided. `history`: who decided "
            f"what, when and from where in a session (--session, default {DEFAULT_SESSION}). Exit 1 on an error, "
            "2 on a usage error."
        ),
    )
    parser.add_argument(
        "action", nargs="?", default="list", choices=ACTIONS, help="list (default), approve, deny or history"
    )
    parser.add_argument("approval_id", nargs="?", default=None, metavar="ID", help="the approval to answer")
    parser.add_argument(
        "-s",
        "--session",
        default=None,
        metavar="KEY",
        help=f"list: only this session's approvals; history: this session's (default {DEFAULT_SESSION})",
    )
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="history: the N latest (default 50)")
    parser.add_argument(
        "--session-wide",
        action="store_true",
        help="approve: also allow the calls this approval stands for, for the rest of its session",
    )
    parser.add_argument("--json", action="store_true", help="print the gateway's answer as JSON")
    local_token.add_arguments(parser)
    parser.add_argument("--timeout", type=float, default=30.0, metavar="S", help="RPC timeout (default 30)")
    parser.set_defaults(func=run)
    return parser


def _usage(args: argparse.Namespace) -> str | None:
    """What is wrong with the combination of arguments, if anything."""
    if args.limit is not None and (args.action != "history" or args.limit < 1):
        return "--limit goes with history, and is at least 1"
    if args.action in ("list", "history"):
        if args.approval_id is not None:
            return f"{args.action} takes no ID (got {args.approval_id!r}); to answer one: approve ID or deny ID"
        if args.session_wide:
            return "--session-wide goes with approve"
        if args.session is not None and not args.session.strip():
            return "--session must not be empty"
        return None
    if not (args.approval_id or "").strip():
        return f"{args.action} needs the approval's ID (`{PROG}` lists them)"
    if args.session is not None:
        return "--session goes with list and history (an ID names its session)"
    if args.session_wide and args.action != "approve":
        return "--session-wide goes with approve"
    return None


def run(args: argparse.Namespace) -> int:
    problem = _usage(args)
    if problem:
        gateway.error(PROG, problem)
        return 2
    return gateway.run(PROG, args, "approvals", lambda client, _url: _act(client, args), _failure)


def _act(client: Any, args: argparse.Namespace) -> int:
    if args.action == "list":
        return _list(client, args)
    if args.action == "history":
        return _history(client, args)
    return _answer(client, args)


def _failure(code: int, message: str) -> str:
    if code == 403:
        return f"not allowed to answer: {message} (403)"
    return f"{message} ({code})"


# --- list -------------------------------------------------------------------------------------------------------


def _pending(client: Any, session: str | None) -> list[dict[str, Any]]:
    params = {"sessionKey": session.strip()} if session else {}
    payload = client.call("approval.list", params)
    approvals = payload.get("approvals") if isinstance(payload, dict) else None
    return [a for a in approvals if isinstance(a, dict)] if isinstance(approvals, list) else []


def _list(client: Any, args: argparse.Namespace) -> int:
    approvals = _pending(client, args.session)
    if args.json:
        print(json.dumps({"approvals": approvals}, indent=2, ensure_ascii=False))
        return 0
    if not approvals:
        where = f" in {args.session.strip()}" if args.session else ""
        print(f"No approvals pending{where}.")
        return 0
    now = time.time() * 1000
    for i, approval in enumerate(approvals):
        if i:
            print()
        print("\n".join(approval_lines(approval, now)))
    print()
    print(f"Answer with `{PROG} approve ID` (--session-wide: for the rest of the session too) or `{PROG} deny ID`.")
    return 0


# --- history ----------------------------------------------------------------------------------------------------

DECIDED = {"approve": "approved", "deny": "denied", "timeout": "timed out", "cancel": "cancelled"}


def _when(ms: Any) -> str:
    if not isinstance(ms, (int, float)) or isinstance(ms, bool):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def _history(client: Any, args: argparse.Namespace) -> int:
    session = (args.session or DEFAULT_SESSION).strip()
    params: dict[str, Any] = {"sessionKey": session}
    if args.limit is not None:
        params["limit"] = args.limit
    payload = client.call("approval.history", params)
    entries = payload.get("entries") if isinstance(payload, dict) else None
    entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    if args.json:
        print(json.dumps({"entries": entries}, indent=2, ensure_ascii=False))
        return 0
    if not entries:
        print(f"No approvals decided in {session}.")
        return 0
    for entry in entries:
        by = entry.get("by")
        who = str((by.get("label") or by.get("id")) if isinstance(by, dict) else "") or "?"
        decision = str(entry.get("decision") or "?")
        line = (
            f"{_when(entry.get('decidedAt'))}  {DECIDED.get(decision, decision):<9}  {entry.get('tool', '?')}  "
            f"{entry.get('approvalId', '?')}  by {who} via {entry.get('via') or '?'}"
        )
        print(line)
        print(f"  args:   {args_line(entry.get('args'))}")
    return 0


# --- approve / deny ---------------------------------------------------------------------------------------------


def _answer(client: Any, args: argparse.Namespace) -> int:
    approval_id = args.approval_id.strip()
    decision = "approve" if args.action == "approve" else "deny"
    known = next((a for a in _pending(client, None) if a.get("approvalId") == approval_id), None)
    params: dict[str, Any] = {"approvalId": approval_id, "decision": decision, "via": "cli"}
    if args.session_wide:
        params["remember"] = "session"
    result = client.call("approval.resolve", params)
    if not isinstance(result, dict):
        gateway.error(PROG, f"approval.resolve answered {result!r}")
        return 1
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    if not result.get("resolved"):
        message = str(result.get("message") or f"Already decided: {result.get('decision', '?')}")
        gateway.error(PROG, message)
        return ALREADY_DECIDED
    if not args.json:
        what = f"{known.get('tool', '?')} in {known.get('sessionKey', '?')} ({approval_id})" if known else approval_id
        done = "Approved" if decision == "approve" else "Denied"
        line = f"{done} {what}."
        if args.session_wide:
            line += " Calls like it run without asking for the rest of that session."
        print(line)
    return 0

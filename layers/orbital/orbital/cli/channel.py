"""`orbital channel telegram setup|status|remove`: drive a built-in channel through the gateway's channel RPCs.

`setup` optionally stores the bot token (`config.set`), then calls `channel.start`, which registers the webhook;
`status` calls `channel.status`; `remove` calls `channel.stop`, which deletes the webhook. Results are printed as
JSON; an error goes to stderr with exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from orbital.protocol import local_token

DEFAULT_URL = "ws://127.0.0.1:8765/ws"
BOT_TOKEN_ENV = "TELEGRAM_BOT_TOKEN"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `channel` subcommand on an argparse subparsers object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "channel",
        help="set up, inspect or remove a built-in messenger channel (telegram)",
        description="Set up, inspect or remove a built-in messenger channel through a running gateway.",
    )
    channels = parser.add_subparsers(dest="channel", required=True)
    telegram = channels.add_parser("telegram", help="a Telegram bot: webhook in, Bot API out")
    actions = telegram.add_subparsers(dest="action", required=True)

    setup = actions.add_parser(
        "setup",
        help="register the bot's webhook (channel.start)",
        description=(
            "Register the webhook of a Telegram bot with Telegram. The bot token is read from "
            f"channels.telegram.accounts.ID.botToken, or stored there first from --bot-token / ${BOT_TOKEN_ENV}. "
            "The webhook URL is --webhook-url, else the account's webhookUrl, else "
            "{channels.telegram.publicBaseUrl}/channels/telegram/ID/webhook."
        ),
    )
    _common(setup)
    setup.add_argument("--webhook-url", default=None, metavar="URL", help="public HTTPS URL of this account's webhook")
    setup.add_argument(
        "--bot-token",
        default=None,
        metavar="TOKEN",
        help=f"store this bot token first (env {BOT_TOKEN_ENV}; prefer the variable: arguments end up in history)",
    )
    setup.set_defaults(func=_cmd_setup)

    status = actions.add_parser("status", help="webhook and bot status (channel.status)")
    _common(status, account_default=None)
    status.set_defaults(func=_cmd_status)

    remove = actions.add_parser("remove", help="delete the webhook (channel.stop)")
    _common(remove)
    remove.set_defaults(func=_cmd_remove)
    return parser


def _common(parser: argparse.ArgumentParser, *, account_default: str | None = "default") -> None:
    help_text = "account id" + (f" (default {account_default})" if account_default else " (default: every account)")
    parser.add_argument("--account", default=account_default, metavar="ID", help=help_text)
    local_token.add_arguments(parser)
    parser.add_argument("--timeout", type=float, default=30.0, metavar="S", help="RPC timeout (default 30)")


def _calls(args: argparse.Namespace, calls: list[tuple[str, dict[str, Any]]]) -> int:
    """Run the calls in order on one connection; print the last result."""
    # lazy: only this command needs it (the parser of every `orbital` command imports this module)
    from orbital.client import GatewayClient, RpcFailedError

    try:
        url, token = local_token.from_arguments("orbital channel", args)
    except local_token.TokenFileError as exc:
        print(f"orbital channel: {exc}", file=sys.stderr)
        return 1
    payload: Any = None
    try:
        with GatewayClient(url, timeout=args.timeout) as client:
            client.connect("client", None, token=token)
            for method, params in calls:
                payload = client.call(method, params)
    except RpcFailedError as exc:
        print(f"orbital channel: {exc.message} ({exc.code})", file=sys.stderr)
        return 1
    except (OSError, TimeoutError) as exc:
        print(f"orbital channel: cannot reach the gateway ({type(exc).__name__})", file=sys.stderr)
        return 1
    except Exception as exc:
        print(f"orbital channel: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(payload, indent=2, ensure_ascii=False))
    return 0


def _cmd_setup(args: argparse.Namespace) -> int:
    calls: list[tuple[str, dict[str, Any]]] = []
    bot_token = args.bot_token or os.environ.get(BOT_TOKEN_ENV)
    if bot_token:
        path = f"channels.{args.channel}.accounts.{args.account}.botToken"
        calls.append(("config.set", {"path": path, "value": bot_token}))
    config: dict[str, Any] = {"webhookUrl": args.webhook_url} if args.webhook_url else {}
    calls.append(("channel.start", {"channel": args.channel, "accountId": args.account, "config": config}))
    return _calls(args, calls)


def _cmd_status(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"channel": args.channel}
    if args.account:
        params["accountId"] = args.account
    return _calls(args, [("channel.status", params)])


def _cmd_remove(args: argparse.Namespace) -> int:
    return _calls(args, [("channel.stop", {"channel": args.channel, "accountId": args.account})])

"""Messaging channels: inbound routing and pairing, reply delivery, and the adapters that reach each messenger (a
connected channel socket, or a built-in one such as Telegram's webhook and Bot API)."""

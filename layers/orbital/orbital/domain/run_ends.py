"""How a run ended when someone asked it to: the error its clients are told. Channel delivery sends no error note for
these (the command's own answer says so), so both the agent and the channels read them here."""

USER_CANCELLED = "Run cancelled by user"
"""`/stop` (or a client's stop of its own run): the current run is cancelled."""
RESET_REASON = "Run cancelled: the session was reset"
"""`/reset` or `session.reset`: the session's run is cancelled with it."""

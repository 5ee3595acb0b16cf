"""The node's side of results too large for one message: the rules live in `orbital.domain.tool_results`, which the
gateway's own MCP calls use too."""

from orbital.domain.tool_results import (
    ENVELOPE_BYTES,
    SAVE_MAX_BYTES,
    FullOutput,
    Saved,
    encoded_size,
    fit_logs_result,
    fit_tool_result,
    full_output,
    note_for,
    too_large,
)

__all__ = [
    "ENVELOPE_BYTES",
    "SAVE_MAX_BYTES",
    "FullOutput",
    "Saved",
    "encoded_size",
    "fit_logs_result",
    "fit_tool_result",
    "full_output",
    "note_for",
    "too_large",
]

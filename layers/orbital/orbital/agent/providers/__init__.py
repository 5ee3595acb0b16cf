"""Model providers: one call in, one stored assistant message out, streaming deltas to a sink on the way.

    complete(ModelRequest(provider, model, system, messages, tools, thinking=None, max_tokens=None,
                          timeout_s=300.0, config=None, cancel=None), sink=None) -> assistant message

Wire APIs: Anthropic Messages, OpenAI Chat Completions (OpenAI and every compatible server: OpenRouter, Groq,
Ollama, vLLM, LM Studio, or any `providers.<name>` with a `baseUrl`), Google Gemini, and Amazon Bedrock Converse.
Provider SDKs are imported only when a call needs them (cold start). Messages go in and come out in the stored
(pi-ai) shapes; see `_convert.py`. Failures raise ModelError with `kind` one of auth, not_found, overflow,
transient, bad_request, cancelled, other; retries and the time budget are handled once, in `_runner.py`.
"""

from __future__ import annotations

from orbital.agent.providers._resolve import context_window, has_credentials, resolve_provider
from orbital.agent.providers._runner import complete
from orbital.agent.providers._types import (
    THINKING_LEVELS,
    Cancel,
    ModelError,
    ModelRequest,
    Progress,
    ProviderInfo,
    StreamSink,
)

__all__ = [
    "THINKING_LEVELS",
    "Cancel",
    "ModelError",
    "ModelRequest",
    "Progress",
    "ProviderInfo",
    "StreamSink",
    "complete",
    "context_window",
    "has_credentials",
    "resolve_provider",
]

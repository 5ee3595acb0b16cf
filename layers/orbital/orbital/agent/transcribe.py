"""Voice messages to text (spec §12.6), from audio already stored under `media/{sessionKey}/`.

    transcribe(services, config, r2_key, mime_type) -> text, or None when it could not be transcribed

Providers, by `transcription.provider`:

* `"openai"`: the OpenAI audio transcription endpoint (`{base}/audio/transcriptions`, multipart) with model
  `transcription.model` (default `whisper-1`). Key and endpoint are the `openai` provider's (`apiKeys.openai` or
  OPENAI_API_KEY, `providers.openai.baseUrl` or OPENAI_BASE_URL), so any compatible server works.
* `"aws"`: Amazon Transcribe, batch: a job reads the object straight from the bucket and writes its transcript JSON
  back under `transcripts/`, which is read and deleted. `transcription.languageCode` (e.g. `en-US`) fixes the
  language; without it the language is identified, among `transcription.languageOptions` when given.
* `"none"`: never transcribe.

Unset (or `"auto"`, or GSV's `"workers-ai"`, which does not exist here): OpenAI when an OpenAI key is available,
else Amazon Transcribe when running on AWS, else none. `transcription.timeoutSeconds` (default 120) bounds one
transcription. Audio over 25 MB is not sent. Every failure is logged without its message (an SDK's error text may
quote a key) and returns None: the caller then writes the untranscribed note.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from orbital.agent import spend as spend_caps
from orbital.agent.providers import has_credentials, resolve_provider
from orbital.aws.clients import client as aws_client
from orbital.domain.compaction import estimate_text_tokens
from orbital.domain.media_types import audio_format
from orbital.errors import UnavailableError

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.agent.transcribe")

MAX_AUDIO_BYTES = 25 * 1024 * 1024
AUDIO_BYTES_PER_TOKEN = 100
"""The spend caps' estimate of a recording's input tokens (compressed speech is 2-4 kB a second; a transcription
model counts some 10-20 tokens a second): on the high side, as a reservation should be."""
DEFAULT_MODEL = "whisper-1"
DEFAULT_TIMEOUT_S = 120.0
MIN_TIMEOUT_S = 5.0
MAX_TIMEOUT_S = 600.0
TRANSCRIPTS_PREFIX = "transcripts/"
"""Where Amazon Transcribe writes its output (a session key's colons are not allowed in an output key)."""

POLL_FIRST_S = 1.0
POLL_MAX_S = 5.0
_RETRYABLE_POLL_ERRORS = frozenset({"ThrottlingException", "LimitExceededException", "InternalFailureException"})

NONE = "none"
OPENAI = "openai"
AWS = "aws"
_OFF = frozenset({"none", "off", "disabled", "false"})
_AWS_NAMES = frozenset({"aws", "amazon", "transcribe", "amazon-transcribe"})
_AUTO = frozenset({"", "auto", "default", "workers-ai"})

_AWS_FORMATS = frozenset({"amr", "flac", "m4a", "mp3", "mp4", "ogg", "webm", "wav"})


def _section(config: dict[str, Any] | None) -> dict[str, Any]:
    node = (config or {}).get("transcription")
    return node if isinstance(node, dict) else {}


def configured_provider(config: dict[str, Any] | None) -> str:
    """`transcription.provider` as written, normalised ("" when unset)."""
    raw = _section(config).get("provider")
    return raw.strip().lower() if isinstance(raw, str) else ""


def provider_name(services: Services | None, config: dict[str, Any] | None) -> str:
    """The provider a transcription would use: "openai", "aws" or "none" (see the module docstring)."""
    name = configured_provider(config)
    if name in _OFF:
        return NONE
    if name == OPENAI:
        return OPENAI
    if name in _AWS_NAMES:
        return AWS
    if name not in _AUTO:
        log.warning("unknown transcription.provider %r: choosing one automatically", name)
    if has_credentials(config, OPENAI):
        return OPENAI
    if services is not None and services.capabilities.amazon_transcribe:
        return AWS
    return NONE


def unavailable_reason(services: Services | None, config: dict[str, Any] | None) -> str | None:
    """Why nothing could be transcribed at all, in a few words for the model; None when a provider is usable."""
    name = provider_name(services, config)
    if name == NONE:
        if configured_provider(config) in _OFF:
            return "transcription is turned off: transcription.provider is none"
        return "no transcription service is configured: set transcription.provider"
    if name == OPENAI and not has_credentials(config, OPENAI):
        return "transcription.provider is openai but no OpenAI API key is configured"
    return None


def _timeout(config: dict[str, Any] | None) -> float:
    value = _section(config).get("timeoutSeconds")
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return DEFAULT_TIMEOUT_S
    return min(max(float(value), MIN_TIMEOUT_S), MAX_TIMEOUT_S)


def _format(mime_type: str, r2_key: str) -> str | None:
    found = audio_format(mime_type)
    if found:
        return found
    suffix = r2_key.rsplit(".", 1)[-1].lower() if "." in r2_key.rsplit("/", 1)[-1] else ""
    if suffix == "opus":
        return "ogg"
    return suffix if suffix in _AWS_FORMATS else None


def _error_code(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
    return code if isinstance(code, str) else None


def _describe(exc: BaseException) -> str:
    """An error in words that cannot carry a secret: its type, HTTP status and service error code."""
    parts = [type(exc).__name__]
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        parts.append(str(status))
    code = _error_code(exc)
    if code:
        parts.append(code)
    return " ".join(parts)


def transcribe(services: Services, config: dict[str, Any] | None, r2_key: str, mime_type: str) -> str | None:
    """The text of the stored audio at `r2_key`, or None (no provider, too large, missing, any failure)."""
    name = provider_name(services, config)
    if name == NONE:
        return None
    try:
        info = services.workspace.head(r2_key)
        if info is None:
            log.info("audio %s to transcribe is missing", r2_key)
            return None
        if info.size > MAX_AUDIO_BYTES:
            log.info("audio %s is too large to transcribe (%d bytes)", r2_key, info.size)
            return None
        if name == OPENAI:
            text = _openai(services, config, r2_key, mime_type)
        else:
            text = _aws(services, config, r2_key, mime_type)
    except Exception as exc:
        log.warning("transcribing %s with %s failed: %s", r2_key, name, _describe(exc))
        return None
    if not isinstance(text, str) or not text.strip():
        return None
    return text.strip()


# --- OpenAI ----------------------------------------------------------------------------------------------------


def _openai(services: Services, config: dict[str, Any] | None, r2_key: str, mime_type: str) -> str | None:
    import openai

    info = resolve_provider(config, OPENAI)
    found = services.workspace.get(r2_key)
    if found is None:
        return None
    body = found[0]
    model = _section(config).get("model")
    model = model.strip() if isinstance(model, str) and model.strip() else DEFAULT_MODEL
    filename = f"audio.{_format(mime_type, r2_key) or 'ogg'}"
    content_type = (mime_type or "").split(";", 1)[0].strip() or "application/octet-stream"
    # held to the spend caps (ADR 0044): the audio's worst case reserved, the provider's token count settled
    estimate = max(1, len(body) // AUDIO_BYTES_PER_TOKEN)
    call = spend_caps.ModelCall(OPENAI, model, estimate, max_output=estimate)
    hold = spend_caps.reserve(services, config or {}, call)
    try:
        with openai.OpenAI(
            api_key=info.api_key,
            base_url=info.base_url or None,
            max_retries=1,
            timeout=_timeout(config),
            default_headers=info.headers or None,
        ) as client:
            result = client.audio.transcriptions.create(
                model=model, file=(filename, body, content_type), response_format="json"
            )
    except BaseException:
        hold.release()
        raise
    text = getattr(result, "text", None)
    hold.settle(_usage(result, estimate, text if isinstance(text, str) else ""))
    return text if isinstance(text, str) else None


def _usage(result: Any, estimate: int, text: str) -> dict[str, int]:
    """A transcription's usage for its price: the provider's token counts when it reports them (models priced by
    the token), else the audio's estimate and the transcript's."""
    usage = getattr(result, "usage", None)
    counted = {name: getattr(usage, name, None) for name in ("input_tokens", "output_tokens")}
    if all(isinstance(value, int) and not isinstance(value, bool) for value in counted.values()):
        return {"input": int(counted["input_tokens"] or 0), "output": int(counted["output_tokens"] or 0)}
    return {"input": estimate, "output": estimate_text_tokens(text)}


# --- Amazon Transcribe -----------------------------------------------------------------------------------------


def _aws_job(services: Services, config: dict[str, Any] | None, r2_key: str, mime_type: str) -> dict[str, Any]:
    """The StartTranscriptionJob request for one stored object."""
    bucket = services.workspace.s3_bucket
    if bucket is None:
        raise UnavailableError("Amazon Transcribe reads the audio from S3, and this workspace is not on S3")
    name = f"orbital-{uuid.uuid4().hex}"
    request: dict[str, Any] = {
        "TranscriptionJobName": name,
        "Media": {"MediaFileUri": f"s3://{bucket}/{r2_key}"},
        "OutputBucketName": bucket,
        "OutputKey": f"{TRANSCRIPTS_PREFIX}{name}.json",
    }
    media_format = _format(mime_type, r2_key)
    if media_format in _AWS_FORMATS:
        request["MediaFormat"] = media_format
    section = _section(config)
    language = section.get("languageCode")
    options = section.get("languageOptions")
    if isinstance(language, str) and language.strip():
        request["LanguageCode"] = language.strip()
    else:
        request["IdentifyLanguage"] = True
        if isinstance(options, list):
            chosen = [o.strip() for o in options if isinstance(o, str) and o.strip()]
            if len(chosen) >= 2:  # the service wants at least two options, or none
                request["LanguageOptions"] = chosen
    return request


def transcript_text(document: Any) -> str | None:
    """The text of an Amazon Transcribe output document (`results.transcripts[].transcript`)."""
    results = document.get("results") if isinstance(document, dict) else None
    transcripts = results.get("transcripts") if isinstance(results, dict) else None
    if not isinstance(transcripts, list):
        return None
    texts = [t["transcript"] for t in transcripts if isinstance(t, dict) and isinstance(t.get("transcript"), str)]
    return " ".join(t.strip() for t in texts if t.strip()) or None


def _aws(
    services: Services,
    config: dict[str, Any] | None,
    r2_key: str,
    mime_type: str,
    *,
    client: Any = None,
    sleep: Any = time.sleep,
    clock: Any = time.monotonic,
) -> str | None:
    if services.workspace.s3_bucket is None:
        log.warning("Amazon Transcribe reads the audio from S3, and this workspace is not on S3")
        return None
    if client is None:
        client = aws_client("transcribe")
    request = _aws_job(services, config, r2_key, mime_type)
    name = request["TranscriptionJobName"]
    output_key = request["OutputKey"]
    deadline = clock() + _timeout(config)
    client.start_transcription_job(**request)
    try:
        delay = POLL_FIRST_S
        while True:
            try:
                job = client.get_transcription_job(TranscriptionJobName=name).get("TranscriptionJob") or {}
                status = job.get("TranscriptionJobStatus")
            except Exception as exc:
                if _error_code(exc) not in _RETRYABLE_POLL_ERRORS:
                    raise
                status = "RETRY"
            if status == "COMPLETED":
                break
            if status == "FAILED":
                log.warning("transcription job %s failed: %s", name, str(job.get("FailureReason") or "")[:200])
                return None
            if clock() + delay > deadline:
                log.warning("transcription job %s did not finish in time", name)
                return None
            sleep(delay)
            delay = min(delay * 1.5, POLL_MAX_S)
        found = services.workspace.get(output_key)
        if found is None:
            log.warning("transcription job %s finished without a transcript", name)
            return None
        return transcript_text(json.loads(found[0]))
    finally:
        _aws_cleanup(services, client, name, output_key)


def _aws_cleanup(services: Services, client: Any, name: str, output_key: str) -> None:
    try:
        services.workspace.delete(output_key)
    except Exception as exc:
        log.info("could not delete transcript %s: %s", output_key, _describe(exc))
    try:
        client.delete_transcription_job(TranscriptionJobName=name)
    except Exception as exc:
        log.info("could not delete transcription job %s: %s", name, _describe(exc))

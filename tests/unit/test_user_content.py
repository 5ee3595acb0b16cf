"""The content of a stored user message (spec §5.3 `buildUserMessage`) and the choice of transcriber (§12.6)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from orbital.agent import transcribe, turn
from orbital.agent.user_content import build_user_content
from orbital.ports import capabilities
from orbital.ports.capabilities import on_own_machine

LOCAL: Any = SimpleNamespace(capabilities=on_own_machine(None))
ON_AWS: Any = SimpleNamespace(capabilities=capabilities.ON_AWS)
WITH_OPENAI = {"transcription": {"provider": "openai"}, "apiKeys": {"openai": "sk-unit"}}
NO_TRANSCRIBER = "(no transcription service is configured: set transcription.provider)"

IMAGE: dict[str, Any] = {"type": "image", "mimeType": "image/jpeg", "r2Key": "media/agent:main:main/a.jpg", "size": 10}
AUDIO: dict[str, Any] = {"type": "audio", "mimeType": "audio/ogg", "r2Key": "media/agent:main:main/b.ogg", "size": 2000}
VIDEO: dict[str, Any] = {"type": "video", "mimeType": "video/mp4", "r2Key": "media/agent:main:main/c.mp4"}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


@pytest.fixture(autouse=True)
def _no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


class Transcriber:
    """Stands in for the transcription call: records its arguments, answers from `answers` (default "hello")."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.answers: dict[str, str | None] = {}

    def __call__(self, services: Any, config: Any, r2_key: str, mime_type: str) -> str | None:
        self.calls.append((services, config, r2_key, mime_type))
        return self.answers.get(r2_key, "hello")


@pytest.fixture
def transcriber(monkeypatch: pytest.MonkeyPatch) -> Transcriber:
    fake = Transcriber()
    monkeypatch.setattr(transcribe, "transcribe", fake)
    return fake


# --- text only ------------------------------------------------------------------------------------------------


def test_text_without_media_is_a_string() -> None:
    assert build_user_content(LOCAL, {}, "hi", None) == "hi"
    assert build_user_content(LOCAL, {}, "hi", []) == "hi"
    assert build_user_content(LOCAL, {}, "", []) == "[Empty message]"


def test_video_alone_counts_as_no_media() -> None:
    assert build_user_content(LOCAL, {}, "look", [VIDEO]) == "look"
    assert build_user_content(LOCAL, {}, "", [VIDEO]) == "[Empty message]"


def test_the_media_placeholder_text_is_kept_when_there_is_no_media() -> None:
    assert build_user_content(LOCAL, {}, "[Media]", []) == "[Media]"


# --- images ---------------------------------------------------------------------------------------------------


def test_text_then_image_reference() -> None:
    content = build_user_content(LOCAL, {}, "what is this?", [IMAGE])
    assert content == [text("what is this?"), {"type": "image", "r2Key": IMAGE["r2Key"], "mimeType": "image/jpeg"}]


def test_media_placeholder_text_is_dropped() -> None:
    content = build_user_content(LOCAL, {}, "[Media]", [IMAGE])
    assert content == [{"type": "image", "r2Key": IMAGE["r2Key"], "mimeType": "image/jpeg"}]


def test_empty_text_is_dropped() -> None:
    content = build_user_content(LOCAL, {}, "", [IMAGE])
    assert content == [{"type": "image", "r2Key": IMAGE["r2Key"], "mimeType": "image/jpeg"}]


def test_an_image_never_stored_goes_inline() -> None:
    content = build_user_content(LOCAL, {}, "", [{"type": "image", "mimeType": "image/png", "data": "aGk="}])
    assert content == [{"type": "image", "data": "aGk=", "mimeType": "image/png"}]


def test_an_image_with_nothing_to_show_leaves_the_fallback() -> None:
    assert build_user_content(LOCAL, {}, "[Media]", [{"type": "image", "mimeType": "image/png"}]) == [
        text("[Media message]")
    ]


# --- documents ------------------------------------------------------------------------------------------------


def doc(**fields: Any) -> dict[str, Any]:
    return {"type": "document", "mimeType": "application/pdf", "r2Key": "media/k/d.pdf", **fields}


@pytest.mark.parametrize(
    ("size", "shown"),
    [(12_800, " (13KB)"), (1536, " (2KB)"), (2560, " (3KB)"), (1024, " (1KB)"), (100, " (0KB)"), (None, ""), (0, "")],
)
def test_document_note_with_size_rounded_to_kb(size: int | None, shown: str) -> None:
    entry = doc(filename="report.pdf") if size is None else doc(filename="report.pdf", size=size)
    assert build_user_content(LOCAL, {}, "", [entry]) == [
        text(f"[Document attached: report.pdf{shown}, type: application/pdf]")
    ]


def test_document_without_filename() -> None:
    assert build_user_content(LOCAL, {}, "see attached", [doc(size=4096)]) == [
        text("see attached"),
        text("[Document attached: document (4KB), type: application/pdf]"),
    ]


# --- voice messages -------------------------------------------------------------------------------------------


def test_a_given_transcription_is_used_without_transcribing(transcriber: Transcriber) -> None:
    entry = {**AUDIO, "transcription": " buy milk "}
    assert build_user_content(LOCAL, WITH_OPENAI, "", [entry]) == [text("[Voice message transcription: buy milk]")]
    assert transcriber.calls == []


def test_stored_audio_is_transcribed(transcriber: Transcriber) -> None:
    content = build_user_content(LOCAL, WITH_OPENAI, "[Media]", [AUDIO])
    assert content == [text("[Voice message transcription: hello]")]
    assert transcriber.calls == [(LOCAL, WITH_OPENAI, AUDIO["r2Key"], "audio/ogg")]


def test_audio_that_could_not_be_transcribed(transcriber: Transcriber) -> None:
    transcriber.answers[AUDIO["r2Key"]] = None
    content = build_user_content(LOCAL, WITH_OPENAI, "", [AUDIO])
    assert content == [text("[Voice message received - transcription unavailable]")]
    assert len(transcriber.calls) == 1


def test_audio_never_stored_is_not_transcribed(transcriber: Transcriber) -> None:
    entry = {"type": "audio", "mimeType": "audio/ogg", "data": "aGk="}
    content = build_user_content(LOCAL, WITH_OPENAI, "", [entry])
    assert content == [text("[Voice message received - transcription unavailable]")]
    assert transcriber.calls == []


def test_no_transcriber_configured_says_so_once(transcriber: Transcriber) -> None:
    second = {**AUDIO, "r2Key": "media/agent:main:main/c.ogg"}
    content = build_user_content(LOCAL, {}, "two notes", [AUDIO, second])
    assert content == [
        text("two notes"),
        text("[Voice message received - transcription unavailable]"),
        text(NO_TRANSCRIBER),
        text("[Voice message received - transcription unavailable]"),
    ]
    assert transcriber.calls == []


def test_transcription_turned_off(transcriber: Transcriber) -> None:
    content = build_user_content(ON_AWS, {"transcription": {"provider": "none"}}, "", [AUDIO])
    assert content == [
        text("[Voice message received - transcription unavailable]"),
        text("(transcription is turned off: transcription.provider is none)"),
    ]
    assert transcriber.calls == []


def test_openai_chosen_without_a_key(transcriber: Transcriber) -> None:
    content = build_user_content(LOCAL, {"transcription": {"provider": "openai"}}, "", [AUDIO])
    assert content[1] == text("(transcription.provider is openai but no OpenAI API key is configured)")
    assert transcriber.calls == []


def test_without_services_nothing_is_transcribed(transcriber: Transcriber) -> None:
    content = build_user_content(None, WITH_OPENAI, "", [AUDIO])
    assert content == [
        text("[Voice message received - transcription unavailable]"),
        text("(no transcription service is available)"),
    ]
    assert transcriber.calls == []


# --- errors, order, video -------------------------------------------------------------------------------------


def test_attachments_with_an_error() -> None:
    too_large = "Media file too large (30.0MB > 25MB limit)"
    media: list[dict[str, Any]] = [
        {"type": "image", "mimeType": "image/png", "size": 31_457_280, "error": too_large},
        {"type": "audio", "mimeType": "audio/ogg", "error": "Media could not be stored"},
        {"type": "document", "mimeType": "application/pdf", "filename": "x.pdf", "error": too_large},
    ]
    assert build_user_content(LOCAL, {}, "", media) == [
        text(f"[Attachment not available: {too_large}]"),
        text("[Attachment not available: Media could not be stored]"),
        text(f"[Attachment not available: {too_large}]"),
    ]


def test_blocks_come_in_spec_order_and_video_is_ignored(transcriber: Transcriber) -> None:
    media = [doc(filename="a.pdf", size=2048), VIDEO, AUDIO, IMAGE]
    content = build_user_content(LOCAL, WITH_OPENAI, "all of it", media)
    assert content == [
        text("all of it"),
        {"type": "image", "r2Key": IMAGE["r2Key"], "mimeType": "image/jpeg"},
        text("[Voice message transcription: hello]"),
        text("[Document attached: a.pdf (2KB), type: application/pdf]"),
    ]


def test_turn_user_message_uses_it() -> None:
    message = turn.user_message({"text": "[Media]", "media": [IMAGE, VIDEO]}, 123)
    assert message == {
        "role": "user",
        "content": [{"type": "image", "r2Key": IMAGE["r2Key"], "mimeType": "image/jpeg"}],
        "timestamp": 123,
    }
    assert turn.user_message({"text": ""}, 5) == {"role": "user", "content": "[Empty message]", "timestamp": 5}


# --- which transcriber ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("services", "config", "expected"),
    [
        (LOCAL, {}, "none"),
        (ON_AWS, {}, "aws"),
        (LOCAL, {"apiKeys": {"openai": "sk-x"}}, "openai"),
        (ON_AWS, {"apiKeys": {"openai": "sk-x"}}, "openai"),
        (ON_AWS, {"transcription": {"provider": "workers-ai"}}, "aws"),
        (LOCAL, {"transcription": {"provider": "workers-ai"}, "apiKeys": {"openai": "sk-x"}}, "openai"),
        (ON_AWS, {"transcription": {"provider": "auto"}}, "aws"),
        (LOCAL, {"transcription": {"provider": "aws"}}, "aws"),
        (LOCAL, {"transcription": {"provider": "OpenAI"}}, "openai"),
        (ON_AWS, {"transcription": {"provider": "none"}, "apiKeys": {"openai": "sk-x"}}, "none"),
    ],
)
def test_provider_choice(services: Any, config: dict[str, Any], expected: str) -> None:
    assert transcribe.provider_name(services, config) == expected


def test_openai_key_from_the_environment_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    assert transcribe.provider_name(LOCAL, {}) == "openai"
    assert transcribe.unavailable_reason(LOCAL, {}) is None

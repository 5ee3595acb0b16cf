"""Media types: stored extensions and the container format transcription is told (orbital.domain.media_types)."""

from __future__ import annotations

import pytest
from orbital.agent import transcribe
from orbital.domain.media_types import EXTENSIONS, audio_format, extension


@pytest.mark.parametrize(
    ("mime_type", "expected"),
    [
        ("audio/ogg", "ogg"),
        ("Audio/OGG; codecs=opus", "ogg"),
        ("audio/opus", "ogg"),
        ("audio/mpeg", "mp3"),
        ("audio/mp3", "mp3"),
        ("audio/mp4", "m4a"),
        ("audio/x-m4a", "m4a"),
        ("audio/wave", "wav"),
        ("audio/x-flac", "flac"),
        ("audio/webm", "webm"),
        ("audio/amr", "amr"),
        ("video/mp4", "mp4"),
        ("video/webm", None),
        ("image/png", None),
        ("audio/x-unknown", None),
        ("", None),
        (None, None),
    ],
)
def test_audio_format(mime_type: object, expected: str | None) -> None:
    assert audio_format(mime_type) == expected


def test_a_stored_sound_keeps_its_own_extension() -> None:
    assert extension("audio/opus") == "opus"  # the file is named for what it is; only transcription says "ogg"
    assert extension("audio/amr") == "amr"
    assert all(audio_format(t) is not None for t in EXTENSIONS if t.startswith("audio/"))


def test_transcription_names_the_format_from_the_shared_table() -> None:
    assert transcribe._format("audio/ogg; codecs=opus", "media/a/voice") == "ogg"
    assert transcribe._format("audio/amr", "media/a/voice") == "amr"
    # an unknown type falls back to the stored object's suffix
    assert transcribe._format("application/octet-stream", "media/a/voice.opus") == "ogg"
    assert transcribe._format("application/octet-stream", "media/a/voice.flac") == "flac"
    assert transcribe._format("application/octet-stream", "media/a/voice.bin") is None

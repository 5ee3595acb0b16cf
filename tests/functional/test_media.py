"""Inbound media in moto: attachments stored under `media/{sessionKey}/`, voice messages transcribed (OpenAI against
the scripted server on loopback, Amazon Transcribe against moto and a stand-in), and a run whose input carries an
image and a voice message."""

from __future__ import annotations

import base64
import json
import logging
import re
from typing import Any

import boto3
import pytest
from orbital.agent import runs, transcribe
from orbital.channels import media as channel_media
from orbital.channels.media import store_attachments

from tests.conftest import BUCKET, wait_for
from tests.support.fake_llm import FakeLLM, error, reply

KEY = "agent:main:main"
JPEG = b"\xff\xd8\xff\xe0fake-jpeg-bytes"
OGG = b"OggS\x00fake-voice-note" * 20
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def s3() -> Any:
    return boto3.client("s3", region_name="us-east-1")


def media_keys(session_key: str = KEY) -> list[str]:
    listed = s3().list_objects_v2(Bucket=BUCKET, Prefix=f"media/{session_key}/")
    return [o["Key"] for o in listed.get("Contents", [])]


@pytest.fixture(autouse=True)
def _no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


# --- store_attachments ----------------------------------------------------------------------------------------


def test_attachments_are_stored_and_replaced_by_references(services: Any) -> None:
    stored = store_attachments(
        services,
        KEY,
        [
            {"type": "image", "mimeType": "image/jpeg", "data": b64(JPEG), "filename": "café.jpg", "size": 999},
            {
                "type": "audio",
                "mimeType": "audio/ogg; codecs=opus",
                "data": b64(OGG),
                "duration": 4,
                "transcription": "already done",
            },
            {"type": "document", "mimeType": "application/x-unknown", "data": b64(b"%PDF")},
        ],
    )
    image, audio, document = stored
    assert re.fullmatch(rf"media/{KEY}/{UUID}\.jpg", image["r2Key"])
    assert image == {
        "type": "image",
        "mimeType": "image/jpeg",
        "r2Key": image["r2Key"],
        "filename": "café.jpg",
        "size": len(JPEG),  # the bytes' size, not the one declared
    }
    assert re.fullmatch(rf"media/{KEY}/{UUID}\.ogg", audio["r2Key"])
    assert audio == {
        "type": "audio",
        "mimeType": "audio/ogg; codecs=opus",
        "r2Key": audio["r2Key"],
        "duration": 4,
        "transcription": "already done",
        "size": len(OGG),
    }
    assert document["r2Key"].endswith(".bin") and "data" not in document
    assert sorted(media_keys()) == sorted(e["r2Key"] for e in stored)

    obj = s3().get_object(Bucket=BUCKET, Key=image["r2Key"])
    assert obj["Body"].read() == JPEG
    assert obj["ContentType"] == "image/jpeg"
    meta = obj["Metadata"]
    assert meta["originalfilename"] == "caf%C3%A9.jpg"  # ASCII only in object metadata, reversible
    assert meta["sessionkey"] == KEY
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", meta["uploadedat"])
    assert s3().head_object(Bucket=BUCKET, Key=audio["r2Key"])["ContentType"] == "audio/ogg"
    assert "originalfilename" not in s3().head_object(Bucket=BUCKET, Key=audio["r2Key"])["Metadata"]


def test_too_large_declared_size_is_refused_without_storing(services: Any) -> None:
    entry = {"type": "image", "mimeType": "image/png", "data": b64(b"png"), "size": 26 * 1024 * 1024}
    assert store_attachments(services, KEY, [entry]) == [
        {
            "type": "image",
            "mimeType": "image/png",
            "size": 26 * 1024 * 1024,
            "error": "Media file too large (26.0MB > 25MB limit)",
        }
    ]
    assert media_keys() == []


class SizedStandIn(str):
    """Base64 text that reports the length of a 27,000,000-byte file without holding one."""

    def __len__(self) -> int:
        return 36_000_000


def test_too_large_data_is_refused_before_decoding(services: Any) -> None:
    entry = {"type": "audio", "mimeType": "audio/ogg", "data": SizedStandIn(b64(OGG)), "filename": "long.ogg"}
    assert store_attachments(services, KEY, [entry]) == [
        {
            "type": "audio",
            "mimeType": "audio/ogg",
            "filename": "long.ogg",
            "size": 27_000_000,
            "error": "Media file too large (25.7MB > 25MB limit)",
        }
    ]
    assert media_keys() == []


def test_video_is_passed_on_without_its_data(services: Any) -> None:
    entry = {"type": "video", "mimeType": "video/mp4", "data": b64(b"movie"), "filename": "v.mp4", "size": 5}
    assert store_attachments(services, KEY, [entry]) == [
        {"type": "video", "mimeType": "video/mp4", "filename": "v.mp4", "size": 5}
    ]
    assert media_keys() == []


def test_entries_without_data_pass_and_bad_data_is_noted(services: Any) -> None:
    ref = {"type": "image", "mimeType": "image/png", "r2Key": "media/x/y.png", "size": 3}
    broken = {"type": "audio", "mimeType": "audio/ogg", "error": "download failed"}
    bad = {"type": "image", "mimeType": "image/png", "data": "not base64 at all!"}
    assert store_attachments(services, KEY, [ref, broken, bad, "junk"]) == [  # type: ignore[list-item]
        ref,
        broken,
        {"type": "image", "mimeType": "image/png", "error": "Media data could not be decoded"},
    ]
    assert media_keys() == []


def test_a_store_failure_keeps_the_entry_with_a_note(services: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("bucket unavailable")

    monkeypatch.setattr(services.workspace, "put", refuse)
    entry = {"type": "document", "mimeType": "application/pdf", "data": b64(b"%PDF-1.4"), "filename": "a.pdf"}
    assert store_attachments(services, KEY, [entry]) == [
        {
            "type": "document",
            "mimeType": "application/pdf",
            "filename": "a.pdf",
            "size": 8,
            "error": channel_media.NOT_STORED,
        }
    ]


# --- transcription: OpenAI ------------------------------------------------------------------------------------


def stored_audio(services: Any, body: bytes = OGG, mime: str = "audio/ogg") -> dict[str, Any]:
    (entry,) = store_attachments(services, KEY, [{"type": "audio", "mimeType": mime, "data": b64(body)}])
    return entry


def openai_config(llm: FakeLLM, **transcription: Any) -> dict[str, Any]:
    return {
        "transcription": {"provider": "openai", **transcription},
        "providers": {"openai": {"baseUrl": f"{llm.base_url}/v1"}},
        "apiKeys": {"openai": "sk-transcribe-secret"},
    }


def test_openai_transcription(services: Any, llm: FakeLLM) -> None:
    audio = stored_audio(services)
    llm.script(reply("  Remember to buy milk.  "))
    config = openai_config(llm, model="whisper-test")
    assert transcribe.transcribe(services, config, audio["r2Key"], "audio/ogg") == "Remember to buy milk."
    (request,) = llm.requests
    assert request.path == "/v1/audio/transcriptions" and request.wire == "transcription"
    assert request.header("authorization") == "Bearer sk-transcribe-secret"
    assert request.model == "whisper-test"
    assert request.body["response_format"] == "json"
    assert request.body["file"]["filename"] == "audio.ogg"
    assert request.body["file"]["data"] == OGG


def test_openai_is_the_automatic_choice_with_a_key_and_whisper_1_the_default(services: Any, llm: FakeLLM) -> None:
    audio = stored_audio(services, mime="audio/mp4")
    llm.script(reply("hi"))
    config = openai_config(llm)
    del config["transcription"]
    assert transcribe.transcribe(services, config, audio["r2Key"], "audio/mp4") == "hi"
    assert llm.requests[0].model == "whisper-1"
    assert llm.requests[0].body["file"]["filename"] == "audio.m4a"


def test_openai_failure_is_none_and_the_key_is_not_logged(
    services: Any, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    audio = stored_audio(services)
    llm.script(error(401, "Incorrect API key provided: sk-transcribe-secret"))
    caplog.set_level(logging.DEBUG, logger="orbital")
    assert transcribe.transcribe(services, openai_config(llm), audio["r2Key"], "audio/ogg") is None
    assert "AuthenticationError 401" in caplog.text
    assert "sk-transcribe-secret" not in caplog.text


def test_blank_transcript_is_none(services: Any, llm: FakeLLM) -> None:
    audio = stored_audio(services)
    llm.script(reply(""))
    assert transcribe.transcribe(services, openai_config(llm), audio["r2Key"], "audio/ogg") is None


def test_large_or_missing_audio_is_not_sent(services: Any, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    audio = stored_audio(services)
    monkeypatch.setattr(transcribe, "MAX_AUDIO_BYTES", len(OGG) - 1)
    assert transcribe.transcribe(services, openai_config(llm), audio["r2Key"], "audio/ogg") is None
    monkeypatch.setattr(transcribe, "MAX_AUDIO_BYTES", 25 * 1024 * 1024)
    assert transcribe.transcribe(services, openai_config(llm), f"media/{KEY}/missing.ogg", "audio/ogg") is None
    assert llm.requests == []


def test_nothing_is_sent_when_turned_off(services: Any, llm: FakeLLM) -> None:
    audio = stored_audio(services)
    config = openai_config(llm)
    config["transcription"]["provider"] = "none"
    assert transcribe.transcribe(services, config, audio["r2Key"], "audio/ogg") is None
    assert llm.requests == []


# --- transcription: Amazon Transcribe -------------------------------------------------------------------------


def test_aws_transcription_against_moto(services: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """moto runs the job's lifecycle (QUEUED, IN_PROGRESS, COMPLETED: one step per GetTranscriptionJob) but writes
    no transcript: a hook on the client writes the output document when the job reports COMPLETED, as the service
    would have by then."""
    from orbital.aws.clients import client

    monkeypatch.setattr(transcribe, "POLL_FIRST_S", 0.01)
    audio = stored_audio(services)
    started: list[dict[str, Any]] = []
    statuses: list[str] = []

    def on_start(params: dict[str, Any], **_: Any) -> None:
        started.append(dict(params))

    def on_get(parsed: dict[str, Any], **_: Any) -> None:
        status = parsed.get("TranscriptionJob", {}).get("TranscriptionJobStatus")
        statuses.append(status)
        if status == "COMPLETED":
            doc = {"results": {"transcripts": [{"transcript": "Call me back"}, {"transcript": "tomorrow."}]}}
            s3().put_object(Bucket=BUCKET, Key=started[0]["OutputKey"], Body=json.dumps(doc).encode())

    transcribe_client = client("transcribe")
    transcribe_client.meta.events.register("provide-client-params.transcribe.StartTranscriptionJob", on_start)
    transcribe_client.meta.events.register("after-call.transcribe.GetTranscriptionJob", on_get)

    config = {"transcription": {"provider": "aws", "languageCode": "en-US"}}
    assert transcribe.transcribe(services, config, audio["r2Key"], "audio/ogg") == "Call me back tomorrow."

    (request,) = started
    assert request["Media"] == {"MediaFileUri": f"s3://{BUCKET}/{audio['r2Key']}"}
    assert request["MediaFormat"] == "ogg" and request["LanguageCode"] == "en-US"
    assert request["OutputBucketName"] == BUCKET
    assert request["OutputKey"] == f"transcripts/{request['TranscriptionJobName']}.json"
    assert statuses == ["QUEUED", "IN_PROGRESS", "COMPLETED"]
    # the transcript and the job are cleaned up
    assert s3().list_objects_v2(Bucket=BUCKET, Prefix="transcripts/").get("KeyCount") == 0
    with pytest.raises(Exception, match="couldn't be found"):
        transcribe_client.get_transcription_job(TranscriptionJobName=request["TranscriptionJobName"])


class StandInTranscribe:
    """A Transcribe client answering GetTranscriptionJob from a list of statuses (or exceptions)."""

    def __init__(self, statuses: list[Any]) -> None:
        self.statuses = statuses
        self.started: list[dict[str, Any]] = []
        self.polls = 0
        self.deleted: list[str] = []

    def start_transcription_job(self, **request: Any) -> dict[str, Any]:
        self.started.append(request)
        return {}

    def get_transcription_job(self, TranscriptionJobName: str) -> dict[str, Any]:
        status = self.statuses[min(self.polls, len(self.statuses) - 1)]
        self.polls += 1
        if isinstance(status, Exception):
            raise status
        job: dict[str, Any] = {"TranscriptionJobName": TranscriptionJobName, "TranscriptionJobStatus": status}
        if status == "FAILED":
            job["FailureReason"] = "The media format is not supported."
        return {"TranscriptionJob": job}

    def delete_transcription_job(self, TranscriptionJobName: str) -> None:
        self.deleted.append(TranscriptionJobName)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def throttled() -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "GetTranscriptionJob")


def run_stand_in(services: Any, config: dict[str, Any], stand_in: StandInTranscribe, clock: Clock) -> str | None:
    audio = stored_audio(services, mime="audio/opus")
    return transcribe._aws(
        services, config, audio["r2Key"], "audio/opus", client=stand_in, sleep=clock.sleep, clock=clock
    )


def test_aws_polling_with_backoff_and_a_throttled_poll(services: Any) -> None:
    """Statuses, failures and timing moto does not produce, with a stand-in client and a fake clock."""
    stand_in = StandInTranscribe(["QUEUED", throttled(), "IN_PROGRESS", "IN_PROGRESS", "COMPLETED"])
    clock = Clock()

    real_get = stand_in.get_transcription_job

    def get_and_write(TranscriptionJobName: str) -> dict[str, Any]:
        answer = real_get(TranscriptionJobName)
        if answer["TranscriptionJob"]["TranscriptionJobStatus"] == "COMPLETED":
            body = json.dumps({"results": {"transcripts": [{"transcript": "ok"}]}}).encode()
            s3().put_object(Bucket=BUCKET, Key=stand_in.started[0]["OutputKey"], Body=body)
        return answer

    stand_in.get_transcription_job = get_and_write  # type: ignore[method-assign]
    config = {"transcription": {"languageOptions": ["en-US", "de-DE"]}}
    assert run_stand_in(services, config, stand_in, clock) == "ok"
    (request,) = stand_in.started
    assert request["MediaFormat"] == "ogg"
    assert request["IdentifyLanguage"] is True and request["LanguageOptions"] == ["en-US", "de-DE"]
    assert "LanguageCode" not in request
    assert clock.sleeps == [1.0, 1.5, 2.25, 3.375]
    assert stand_in.deleted == [request["TranscriptionJobName"]]


def test_aws_failed_job_is_none(services: Any) -> None:
    stand_in = StandInTranscribe(["IN_PROGRESS", "FAILED"])
    assert run_stand_in(services, {}, stand_in, Clock()) is None
    assert stand_in.polls == 2


def test_aws_job_past_its_deadline_is_none(services: Any) -> None:
    stand_in = StandInTranscribe(["IN_PROGRESS"])
    clock = Clock()
    assert run_stand_in(services, {"transcription": {"timeoutSeconds": 20}}, stand_in, clock) is None
    assert clock.now <= 20 and stand_in.polls >= 5


def test_aws_completed_without_a_transcript_is_none(services: Any) -> None:
    stand_in = StandInTranscribe(["COMPLETED"])
    assert run_stand_in(services, {}, stand_in, Clock()) is None


# --- a run with an image and a voice message ------------------------------------------------------------------


def test_a_run_with_an_image_and_a_voice_message(agent: Any, services: Any, llm: FakeLLM) -> None:
    llm.responder = lambda request: reply("Please water the plants.") if request.wire == "transcription" else None
    llm.script(reply("Will do."))
    media = store_attachments(
        services,
        KEY,
        [
            {"type": "image", "mimeType": "image/jpeg", "data": b64(JPEG), "filename": "plant.jpg"},
            {"type": "audio", "mimeType": "audio/ogg", "data": b64(OGG), "duration": 3},
            {"type": "video", "mimeType": "video/mp4", "data": b64(b"clip")},
        ],
    )
    runs.submit(services, KEY, {"text": "[Media]", "media": media})

    def ended() -> list[dict[str, Any]] | None:
        if runs.current_run(services, KEY) is not None:
            return None
        messages = services.sessions.messages(KEY)
        return messages if len(messages) >= 2 else None

    messages = wait_for(ended, timeout=20)
    user, answer = messages[0], messages[-1]
    assert user["role"] == "user"
    assert user["content"] == [
        {"type": "image", "r2Key": media[0]["r2Key"], "mimeType": "image/jpeg"},
        {"type": "text", "text": "[Voice message transcription: Please water the plants.]"},
    ]
    assert answer["role"] == "assistant" and answer["content"][-1]["text"] == "Will do."

    transcription, chat = llm.requests
    assert transcription.wire == "transcription" and transcription.body["file"]["data"] == OGG
    sent = chat.body["messages"][-1]
    assert sent["role"] == "user"
    image_part = next(p for p in sent["content"] if p["type"] == "image_url")
    assert image_part["image_url"]["url"] == f"data:image/jpeg;base64,{b64(JPEG)}"
    assert {"type": "text", "text": "[Voice message transcription: Please water the plants.]"} in sent["content"]

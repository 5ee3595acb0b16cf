"""xeno over the AWS path: the Lambda handlers against moto, the state machines executed, the scripted model over
HTTP. A bearer at the upgrade (what xeno's bridge sends) is checked by `$connect` and remembered; JSON-RPC frames
reach `$default`, answers ride on the route response or are posted, and a run's notifications are posted to the
socket that asked, and to no one else."""

from __future__ import annotations

import base64
import itertools
import json
from typing import Any

from orbital.runtime import gateway

from tests.conftest import GATEWAY_TOKEN as TOKEN
from tests.conftest import wait_for
from tests.support import rules

_ids = itertools.count(1)


def _open(bearer: str | None) -> tuple[str, dict[str, Any]]:
    cid = f"xeno-{next(_ids)}"
    headers = {"Authorization": f"Bearer {bearer}"} if bearer is not None else {}
    event = {"requestContext": {"connectionId": cid, "routeKey": "$connect"}, "headers": headers}
    return cid, gateway.handle_connect(event)


def _send(cid: str, message: Any) -> dict[str, Any] | None:
    body = message if isinstance(message, str) else json.dumps(message)
    answer = gateway.handle_message({"requestContext": {"connectionId": cid, "routeKey": "$default"}, "body": body})
    return json.loads(answer["body"]) if "body" in answer else None


def _posted(sender: Any, cid: str) -> list[dict[str, Any]]:
    return [f for f in sender.frames_to(cid) if isinstance(f, dict)]


def test_a_query_through_the_lambda_handlers(token, flows, agent, llm, sender, services):
    llm.responder = rules.respond
    cid, opened = _open(TOKEN)
    assert opened == {"statusCode": 200}
    other_client = agent.connection_id  # a GSV client, connected meanwhile
    assert _send(cid, {"jsonrpc": "2.0", "id": 1, "method": "gateway.initialize"}) == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"sessionId": None, "history": []},
    }
    query = {"requestId": "r1", "content": "reply with exactly: PONG_AWS", "context": {"type": "rpc"}}
    assert _send(cid, {"jsonrpc": "2.0", "id": 2, "method": "gateway.query", "params": query}) is None
    frames = wait_for(
        lambda: (found := _posted(sender, cid)) and found[-1].get("method") == "gateway.done" and found, timeout=30
    )
    assert frames[0] == {"jsonrpc": "2.0", "id": 2, "result": {"accepted": True}}  # before anything of the run
    streams = [f["params"] for f in frames if f.get("method") == "gateway.stream"]
    assert streams == [{"requestId": "r1", "content": "PONG_AWS", "isPartial": False}]
    assert all(f.get("type") != "evt" for f in frames)  # never a GSV event
    assert any(f.get("event") == "chat" for f in _posted(sender, other_client))  # GSV clients saw the run
    history = _send(cid, {"jsonrpc": "2.0", "id": "h", "method": "gateway.initialize"})
    assert history is not None and history["id"] == "h"
    assert history["result"]["history"][-2:] == [
        {"role": "user", "content": "reply with exactly: PONG_AWS"},
        {"role": "assistant", "content": "PONG_AWS"},
    ]
    assert isinstance(history["result"]["sessionId"], str)


def test_a_wrong_bearer_is_refused_at_the_upgrade_and_none_gets_unauthorized(token, flows, sender, services):
    _, refused = _open("not-the-token")
    assert refused["statusCode"] == 401
    cid, opened = _open(None)
    assert opened == {"statusCode": 200}
    assert _send(cid, {"jsonrpc": "2.0", "id": 5, "method": "gateway.initialize"}) is None
    assert _posted(sender, cid) == [{"jsonrpc": "2.0", "id": 5, "error": {"code": -32000, "message": "Unauthorized"}}]
    assert [(code, reason) for closed, code, reason in sender.closes if closed == cid] == [(4001, "Unauthorized")]


def test_an_uploaded_artifact_is_an_attachment_on_any_gateway(token, flows, agent, llm, sender, services):
    """On AWS the gateway cannot read the client's disk: `orbital xeno-bridge` uploads the file and sends
    `artifact:{id}` as its path. The stored artifact is given to the model as it is."""
    from orbital.store import artifacts

    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    saved = artifacts.save(services.workspace, png, owner=artifacts.GATEWAY_OWNER, mime_type="image/png")
    llm.responder = rules.respond
    cid, _ = _open(TOKEN)
    attachments = [{"type": "image", "path": f"artifact:{saved.artifact_id}"}]
    query = {
        "requestId": "r-img",
        "content": "reply with exactly: SEEN",
        "context": {"type": "rpc"},
        "attachments": attachments,
    }
    assert _send(cid, {"jsonrpc": "2.0", "id": 3, "method": "gateway.query", "params": query}) is None
    frames = wait_for(
        lambda: (found := _posted(sender, cid)) and found[-1].get("method") == "gateway.done" and found, timeout=30
    )
    assert [f["params"]["content"] for f in frames if f.get("method") == "gateway.stream"] == ["SEEN"]
    sent = json.dumps(llm.requests[-1].body)
    assert base64.b64encode(png).decode() in sent  # the model was shown the uploaded bytes

    missing = dict(query, requestId="r-gone", attachments=[{"type": "image", "path": "artifact:0000-0.png"}])
    done = _send(cid, {"jsonrpc": "2.0", "id": 4, "method": "gateway.query", "params": missing})
    assert done == {"jsonrpc": "2.0", "method": "gateway.done", "params": {"requestId": "r-gone"}}
    errors = [f["params"]["error"] for f in _posted(sender, cid) if f.get("method") == "gateway.error"]
    assert errors == ["Cannot read attachment artifact:0000-0.png: no such artifact"]

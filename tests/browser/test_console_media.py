"""Images in the console's transcript that only the gateway token reads: an attachment the xeno bridge uploaded is
a private artifact (`media/{id}`), which the page fetches with its token."""

from __future__ import annotations

import json
import socket
import time

import requests
from orbital.xeno.unix_socket import address, socket_path

from tests.browser.conftest import TOKEN, Console
from tests.e2e.conftest import GatewayProcess
from tests.support.fake_llm import FakeLLM, reply

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000005a1b1c3c50000000049454e44ae426082"
)


def xeno_query(gateway: GatewayProcess, params: dict[str, object]) -> None:
    """A query on the gateway's xeno socket, as xeno's console sends it; returns when its run is done."""
    path = socket_path(gateway.data_dir)
    with address(path) as where, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(where)
        sock.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "gateway.query", "params": params}).encode())
        sock.sendall(b"\n")
        buffer, deadline = b"", time.monotonic() + 30
        while b'"gateway.done"' not in buffer:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            chunk = sock.recv(65536)
            assert chunk, buffer
            buffer += chunk


def test_a_private_upload_in_the_transcript_is_shown_with_the_token(
    console: Console, gateway: GatewayProcess, fake: FakeLLM
) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    made = requests.post(
        f"{gateway.http}/api/artifacts/", files={"file": ("dot.png", PNG, "image/png")}, headers=bearer, timeout=10
    ).json()
    assert requests.get(f"{gateway.http}/media/{made['artifact_id']}", timeout=10).status_code == 404  # private
    fake.script(reply("A dot."))
    attachment = {"type": "image", "path": f"artifact:{made['artifact_id']}", "mimeType": "image/png"}
    params = {"requestId": "with-dot", "content": "what is this?", "context": {"type": "rpc"}}
    xeno_query(gateway, {**params, "attachments": [attachment]})

    console.open()
    image = console.page.locator(".msg-image img").last
    console.page.wait_for_function(
        "() => [...document.querySelectorAll('.msg-image img')].some(i => i.complete && i.naturalWidth > 0)"
    )
    assert (image.get_attribute("src") or "").startswith("blob:")

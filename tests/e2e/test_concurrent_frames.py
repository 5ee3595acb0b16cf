"""Tests whose outcome depends on the order a socket's frames are handled in, again against a gateway that handles
the text frames of one socket concurrently and in a shuffled order, as API Gateway's parallel Lambdas do
(`orbital dev --concurrent-frames --frame-jitter-ms`). Whatever works only because a socket's frames arrive in order
fails here.

Only tests in which one socket sends a frame before the previous one has been handled run in this mode:

- one socket's burst of requests, sent without waiting for the answers (below);
- transfers in chunks (`test_five_megabytes_between_nodes_and_the_workspace`, binary and text framing): a node sends
  its chunks and then `transfer.complete` without waiting. Text chunks may be handled in any order (each carries its
  offset), and `transfer.complete` may overtake the binary chunks still queued (it carries `bytesSent`, which the
  gateway waits for);
- a transfer whose source dies (`test_transfer_whose_source_dies_fails_on_both_sides`): the source's text frame
  after its chunk may be answered first, and its socket closes with the chunk still to handle;
- a tool result too large for a message
  (`test_a_read_larger_than_a_message_is_saved_and_keeps_the_node_connected`): the node saves it whole with a
  transfer it asks for itself, sending the transfer's frames while its `transfer.request` is still unanswered;
- `/stop` right after a `chat.send` (`test_stop_mid_run`): in order, the `/stop` waits for the work `chat.send` does
  after its answer (queueing the run); here it may be handled before that work, as in a Lambda of its own.

The other node, deferred-call and agent tests send each frame of a socket only once the previous one is answered
(a tool call and its one `tool.result`, a late result, a killed node, presigned transfers, runs on separate sockets),
so the order of one socket's frames cannot change their outcome: they run only against the ordered gateway.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from orbital.client import GatewayClient

from tests.e2e.conftest import GatewayProcess

# the same tests, collected here with this module's `gateway` (pytest resolves fixtures per module)
from tests.e2e.test_agent import fake, llm, test_stop_mid_run, user  # noqa: F401
from tests.e2e.test_nodes import (  # noqa: F401
    test_a_read_larger_than_a_message_is_saved_and_keeps_the_node_connected,
    test_five_megabytes_between_nodes_and_the_workspace,
    test_transfer_whose_source_dies_fails_on_both_sides,
)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    extra = ["--concurrent-frames", "--frame-jitter-ms", "15"]
    gw = GatewayProcess(tmp_path_factory.mktemp("gateway") / "data", extra_args=extra).start()
    yield gw
    gw.stop()


def test_one_socket_many_requests_at_once(gateway: GatewayProcess) -> None:
    """Twenty requests sent without waiting: every one answered once, under its own id, whatever the order."""
    with GatewayClient(gateway.url, timeout=20) as client:
        client.connect("client", f"burst-{uuid.uuid4().hex[:6]}")
        ids = [f"burst-{i}" for i in range(20)]
        for i, frame_id in enumerate(ids):
            params = {"path": f"burst.k{i}", "value": i}
            client.send_raw(json.dumps({"type": "req", "id": frame_id, "method": "config.set", "params": params}))
        replies = {frame_id: client.wait_response(frame_id) for frame_id in ids}
        assert all(r["ok"] for r in replies.values())
        assert client.call("config.get", {"path": "burst"})["value"] == {f"k{i}": i for i in range(20)}

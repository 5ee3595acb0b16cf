"""The node, transfer, deferred-call and agent tests again, against a gateway that handles the text frames of one
socket concurrently and in a shuffled order, as API Gateway's parallel Lambdas do (`orbital dev --concurrent-frames
--frame-jitter-ms`). Whatever works only because a socket's frames arrive in order fails here."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from orbital.client import GatewayClient

from tests.e2e.conftest import GatewayProcess

# the same tests, collected here with this module's `gateway` (pytest resolves fixtures per module)
from tests.e2e.test_agent import (  # noqa: F401
    fake,
    llm,
    test_a_node_result_larger_than_a_message_reaches_the_model,
    test_a_streamed_reply,
    test_a_tool_loop_on_a_real_node,
    test_concurrent_sends_queue_and_all_complete,
    test_stop_mid_run,
    user,
)
from tests.e2e.test_nodes import (  # noqa: F401
    test_a_read_larger_than_a_message_is_saved_and_keeps_the_node_connected,
    test_bash_echo_through_the_gateway,
    test_file_tools_through_the_gateway,
    test_five_megabytes_between_nodes_and_the_workspace,
    test_killed_node_fails_pending_call_at_once,
    test_presigned_transfers,
    test_silent_node_times_out_and_late_result_is_dropped,
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

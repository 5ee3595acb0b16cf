"""Every method, from every mode, with wrong-typed and hostile params: a clear error frame (never a 500, never an
exception out of the dispatcher), and the socket still works afterwards."""

from __future__ import annotations

from typing import Any

import pytest
from orbital.methods import registry

JUNK: list[Any] = [-1, True, "", "../../etc/passwd\x00", "a" * 5000, ["x"], {"a": {"b": 1}}]
WHOLE: list[Any] = [None, [], "params", 7, {"unexpected": 1}]


def _cases(spec: Any) -> list[Any]:
    fields = list(getattr(spec.params, "model_fields", {}))
    cases: list[Any] = list(WHOLE)
    for name in fields:
        cases.extend({name: junk} for junk in JUNK)
    if fields:
        cases.extend(dict.fromkeys(fields, junk) for junk in JUNK)
    return cases


NODE = {
    "tools": [{"name": "Echo", "description": "echo", "inputSchema": {"type": "object"}}],
    "nodeRuntime": {
        "hostRole": "execution",
        "hostCapabilities": ["filesystem.list", "filesystem.read", "filesystem.write", "shell.exec"],
        "toolCapabilities": {"Echo": ["shell.exec"]},
    },
}


@pytest.mark.parametrize("mode", ["client", "node", "channel"])
def test_every_method_rejects_bad_params_cleanly(connect: Any, mode: str) -> None:
    extra: dict[str, Any] = NODE if mode == "node" else {}
    if mode == "channel":
        extra = {"channel": "whatsapp", "accountId": "acct"}
    rpc = connect(mode, f"fuzz-{mode}", **extra)
    failures: list[str] = []
    for spec in registry():
        if spec.name == "connect":
            continue
        for params in _cases(spec):
            try:
                res = rpc.frame(spec.name, params)
            except Exception as exc:  # any escape is the failure being looked for
                failures.append(f"{spec.name} {params!r:.80}: raised {type(exc).__name__}: {exc}")
                continue
            if res is None:
                if not spec.deferred:
                    failures.append(f"{spec.name} {params!r:.80}: no response")
                continue
            if not res["ok"]:
                err = res["error"]
                if err["code"] == 500 or not isinstance(err.get("message"), str) or not err["message"]:
                    failures.append(f"{spec.name} {params!r:.80}: {err}")
    assert not failures, "\n".join(failures[:40]) + f"\n({len(failures)} in all)"
    # and the socket is still a working connection (tools.list: the one method every mode may call besides connect)
    assert isinstance(rpc.call("tools.list")["tools"], list)

"""Node runtime validation (spec §1.3, `validateNodeRuntimeInfo`), for nodes of both GSV protocol-1 eras.

A seed-era node (GSV until 2026-02-20, and `orbital node`) sends `hostRole` with `hostOs`, `hostEnv` and
`hostBinStatus*`, and answers `node.probe`. A node of GSV's last protocol-1 release (2026-03-02) sends only
`hostCapabilities` and `toolCapabilities` and never answers a probe: its capabilities alone route. A runtime without
`hostRole` is read the late way (the capability fields are checked as before, every other key is ignored); one with
it is checked as the seed checked it, role and execution baseline included.
"""

from __future__ import annotations

from typing import Any

CAPABILITIES = frozenset(
    {"filesystem.list", "filesystem.read", "filesystem.write", "filesystem.edit", "text.search", "shell.exec"}
)
HOST_ROLES = frozenset({"execution", "specialized"})
EXECUTION_BASELINE = ("filesystem.list", "filesystem.read", "filesystem.write", "shell.exec")


class RuntimeInvalidError(ValueError):
    pass


def _capability_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise RuntimeInvalidError(f"{where} must not be empty")
    out: set[str] = set()
    for item in value:
        if not isinstance(item, str):
            raise RuntimeInvalidError(f"{where} contains unknown capability: {item}")
        cap = item.strip()
        if cap not in CAPABILITIES:
            raise RuntimeInvalidError(f"{where} contains unknown capability: {cap}")
        out.add(cap)
    return sorted(out)


def validate_node_runtime(node_id: str, runtime: Any, tool_names: list[str]) -> dict[str, Any]:
    """Return the normalized runtime or raise RuntimeInvalidError with GSV's detail text. Without `hostRole` (absent or
    null: a late node) only the two capability fields are read and kept."""
    prefix = f"nodeRuntime for {node_id}"
    if not isinstance(runtime, dict):
        raise RuntimeInvalidError(f"{prefix} is required")
    role = runtime.get("hostRole")
    role = role.strip() if isinstance(role, str) else role
    if role is not None and role not in HOST_ROLES:
        raise RuntimeInvalidError(f"{prefix} hostRole must be one of: execution, specialized")
    host_caps = _capability_list(runtime.get("hostCapabilities"), f"{prefix} hostCapabilities")
    seen: set[str] = set()
    for name in tool_names:
        if name in seen:
            raise RuntimeInvalidError(f"Duplicate tool name in node {node_id}: {name}")
        seen.add(name)
    tool_caps_raw = runtime.get("toolCapabilities")
    if not isinstance(tool_caps_raw, dict):
        raise RuntimeInvalidError(f"{prefix} toolCapabilities must be an object")
    for name in tool_names:
        if name not in tool_caps_raw:
            raise RuntimeInvalidError(f"{prefix} toolCapabilities missing entry for tool: {name}")
    tool_caps: dict[str, list[str]] = {}
    for key in sorted(tool_caps_raw):
        if key not in seen:
            raise RuntimeInvalidError(f"{prefix} toolCapabilities has unknown tool key: {key}")
        caps = _capability_list(tool_caps_raw[key], f"{prefix} toolCapabilities.{key}")
        extra = [c for c in caps if c not in host_caps]
        if extra:
            raise RuntimeInvalidError(
                f"{prefix} toolCapabilities.{key} must be a subset of hostCapabilities (extra: {', '.join(extra)})"
            )
        tool_caps[key] = caps
    if role is None:  # a late node: capabilities alone
        return {"hostCapabilities": host_caps, "toolCapabilities": tool_caps}
    if role == "execution":
        missing = [c for c in EXECUTION_BASELINE if c not in host_caps]
        if missing:
            raise RuntimeInvalidError(f"{prefix} missing execution baseline: {', '.join(missing)}")
    out: dict[str, Any] = {"hostRole": role, "hostCapabilities": host_caps, "toolCapabilities": tool_caps}
    host_os = runtime.get("hostOs")
    if host_os is not None:
        if not isinstance(host_os, str) or not host_os.strip():
            raise RuntimeInvalidError(f"{prefix} hostOs must be a non-empty string")
        out["hostOs"] = host_os.strip().lower()
    host_env = runtime.get("hostEnv")
    if host_env is not None:
        if not isinstance(host_env, list) or not all(isinstance(v, str) for v in host_env):
            raise RuntimeInvalidError(f"{prefix} hostEnv must be an array of strings")
        names = sorted({v.strip() for v in host_env if v.strip()})
        if names:
            out["hostEnv"] = names
    bins = runtime.get("hostBinStatus")
    if bins is not None:
        if not isinstance(bins, dict) or not all(isinstance(v, bool) for v in bins.values()):
            raise RuntimeInvalidError(f"{prefix} hostBinStatus must be an object of booleans")
        out["hostBinStatus"] = {k.strip(): bins[k] for k in sorted(bins, key=str.strip) if k.strip()}
    updated = runtime.get("hostBinStatusUpdatedAt")
    if updated is not None:
        if not isinstance(updated, int | float) or isinstance(updated, bool) or updated != updated:
            raise RuntimeInvalidError(f"{prefix} hostBinStatusUpdatedAt must be a finite number")
        out["hostBinStatusUpdatedAt"] = int(updated // 1)
    return out


def declares_role(runtime: Any) -> bool:
    """A seed-era runtime (it names its role, reports its host facts and answers `node.probe`)."""
    return isinstance(runtime, dict) and runtime.get("hostRole") in HOST_ROLES


def effective_role(runtime: Any) -> str:
    """The role a node plays: the one it declares, else (a late node) `execution` when its capabilities hold the
    execution baseline and `specialized` otherwise. A node without runtime is specialized."""
    if not isinstance(runtime, dict):
        return "specialized"
    role = runtime.get("hostRole")
    if role in HOST_ROLES:
        return str(role)
    caps = runtime.get("hostCapabilities") or []
    return "execution" if all(c in caps for c in EXECUTION_BASELINE) else "specialized"

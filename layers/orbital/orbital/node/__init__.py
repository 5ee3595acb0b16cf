"""`orbital node`: the tool host that runs on a user's machine and serves tools, logs, probes and transfers."""

from orbital.node.agent import FatalConnectError, NodeAgent, NodeOptions
from orbital.node.tools import NodeTools, ToolError

__all__ = ["FatalConnectError", "NodeAgent", "NodeOptions", "NodeTools", "ToolError"]

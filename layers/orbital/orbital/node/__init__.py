"""`orbital node`: the tool host that runs on a user's machine and serves tools, logs, probes and transfers."""

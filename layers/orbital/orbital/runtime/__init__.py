"""How the gateway runs: the WebSocket/Lambda adapter, the ports a handler uses (`Services`), socket end-of-life
and the workflow steps."""

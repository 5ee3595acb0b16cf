"""How the gateway runs, and where it is put together: the composition root (`services`: the Services of a
container, with the method registry handed in), the WebSocket/Lambda adapter, the workflow and agent steps, and the
scheduler tick."""

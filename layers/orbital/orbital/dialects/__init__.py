"""Other gateways' clients on the one `/ws`: xeno (JSON-RPC 2.0), Exoclaw (token-first JSON-RPC) and WindieOS (a
handshake, then enveloped messages).

The first text frame of a socket decides its dialect (`detect`), which is then fixed on its connection record. A
translator per dialect turns its frames into the gateway's own methods (through the one dispatcher, with the same
mode rules and errors), and subscribes the socket to the runs it starts: the runs publish their events, and the
dialect's encoder turns each into the frames its clients expect (`orbital.store.subscriptions`). No second session
engine, no second agent loop.
"""

"""xeno's Unix socket outside the gateway's translator: the socket's rules, which the local gateway and the bridge
share (`unix_socket`), and `orbital xeno-bridge`, which serves that socket on this machine for a gateway elsewhere
(`bridge`). The xeno protocol itself is translated by the gateway (`orbital.dialects.xeno`)."""

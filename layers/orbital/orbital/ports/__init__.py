"""The ports every layer above reaches the outside through: `Services` (the table's repositories, the workspace, the
sender that posts to sockets, and the method registry whose hooks it is given), a socket's end of life, and what the
running invocation has left. Nothing here knows a method family: the registry is handed in by the composition root
(`orbital.runtime.services`)."""

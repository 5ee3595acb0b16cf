"""What the place a gateway runs in can do, as its composition root says it (ADR 0049).

The methods, the engines, the dialects and the HTTP routes ask these instead of whether they run on the local
gateway: each answer names the one thing that differs between API Gateway and Lambda on one side and the local
gateway's own bridge and process on the other. The AWS builder (`orbital.runtime.services`) and the local one
(`orbital.local.services`) each give `Services` theirs; nothing below them looks at `settings.local`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    binary_frames: bool
    """A socket carries binary GSV frames both ways (the local bridge; API Gateway refuses inbound binary frames):
    `connect` offers the `binary` transfer mode and a transfer's chunks go as binary frames."""
    chunked_transfers: bool
    """A transfer through the gateway's workspace streams its bytes over the sockets by default (`chunks`); without
    it, presigned URLs of the bucket are the default (`presigned`), so that no function relays the bytes."""
    bounded_responses: bool
    """An HTTP response goes back in a Lambda function's payload (at most `orbital.rest.limits.LAMBDA_BODY_BYTES`):
    a route sends a large object as a redirect to a presigned URL (or refuses it) instead of its bytes."""
    bounded_requests: bool
    """A request is cut off after API Gateway's 29 s (its Lambda invocation's timeout): the calls made inside one
    bound themselves to fit; without it each call has only its own timeout."""
    amazon_transcribe: bool
    """Amazon Transcribe is there to transcribe audio without a key of its own (the function's role)."""
    own_machine: bool
    """The gateway runs on its user's own machine: a client of its Unix socket may name files there by their path,
    and the backups of its data directory are its own to take (`backup.*`)."""
    http_api_url: str | None = None
    """The gateway's own HTTP API URL when the root knows it at start (the local gateway's), else None (on AWS the
    stack's HttpApiUrl output is the client's to give)."""

    @property
    def transfer_modes(self) -> list[str]:
        """The transfer modes `connect` advertises."""
        return ["binary", "text", "presigned"] if self.binary_frames else ["text", "presigned"]

    @property
    def default_transfer_mode(self) -> str:
        return "chunks" if self.chunked_transfers else "presigned"


ON_AWS = Capabilities(
    binary_frames=False,
    chunked_transfers=False,
    bounded_responses=True,
    bounded_requests=True,
    amazon_transcribe=True,
    own_machine=False,
)
"""API Gateway in front of Lambda functions (the AWS builder's)."""


def on_own_machine(http_api_url: str | None) -> Capabilities:
    """The local gateway's: its own bridge and one long-running process on its user's machine."""
    return Capabilities(
        binary_frames=True,
        chunked_transfers=True,
        bounded_responses=False,
        bounded_requests=False,
        amazon_transcribe=False,
        own_machine=True,
        http_api_url=http_api_url,
    )

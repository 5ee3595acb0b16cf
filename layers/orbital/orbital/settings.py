"""Runtime settings, read from the environment on the handler path (never at import).

Every environment variable the package reads is named here, once.
"""

from __future__ import annotations

import functools
import os

from pydantic import BaseModel, ConfigDict, Field

from orbital.protocol.frames import MAX_MESSAGE_BYTES

ENV_TABLE = "ORBITAL_TABLE"
ENV_BUCKET = "ORBITAL_BUCKET"
ENV_STAGE = "ORBITAL_STAGE"
ENV_MGMT_ENDPOINT = "ORBITAL_WS_MGMT_ENDPOINT"
ENV_AUTH_TOKEN = "ORBITAL_AUTH_TOKEN"
ENV_AUTH_TOKEN_SECRET = "ORBITAL_AUTH_TOKEN_SECRET"
ENV_REQUIRE_TOKEN = "ORBITAL_REQUIRE_TOKEN"
ENV_LOCAL = "ORBITAL_LOCAL"
ENV_ENDPOINT = "ORBITAL_AWS_ENDPOINT"
ENV_REGION = "AWS_REGION"
ENV_DEFERRED_SFN = "ORBITAL_DEFERRED_CALL_ARN"
ENV_AGENT_TURN_SFN = "ORBITAL_AGENT_TURN_ARN"
ENV_DEFAULT_MODEL = "ORBITAL_DEFAULT_MODEL"
ENV_DATA_DIR = "ORBITAL_DATA_DIR"


class Settings(BaseModel):
    """What a handler needs to know about the deployment it runs in."""

    model_config = ConfigDict(frozen=True)

    table_name: str = "orbital"
    bucket_name: str = "orbital"
    stage: str = "local"
    region: str = "us-east-1"
    mgmt_endpoint: str | None = None
    auth_token: str | None = Field(default=None, repr=False)
    """The gateway token itself (local gateway, or a deployment that chose an environment variable)."""
    auth_token_secret: str | None = None
    """The Secrets Manager secret holding the token (the template's way): read once per container, see
    `orbital.aws.secrets`."""
    require_token: bool = False
    local: bool = False
    aws_endpoint: str | None = None
    deferred_call_arn: str | None = None
    agent_turn_arn: str | None = None
    default_model: str | None = None
    """`provider/model-id` used while the configuration sets no `model` (the template sets a Bedrock model)."""
    data_dir: str | None = None
    """The local gateway's data directory (its database, token and objects): no client may have a file read from it."""
    connection_ttl_seconds: int = 2 * 3600 + 600
    max_frame_bytes: int = MAX_MESSAGE_BYTES
    """The largest message handled or posted (API Gateway's cap; a reply over it becomes a 413 error)."""


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


@functools.cache
def get_settings() -> Settings:
    env = os.environ
    return Settings(
        table_name=env.get(ENV_TABLE, "orbital"),
        bucket_name=env.get(ENV_BUCKET, "orbital"),
        stage=env.get(ENV_STAGE, "local"),
        region=env.get(ENV_REGION) or env.get("AWS_DEFAULT_REGION") or "us-east-1",
        mgmt_endpoint=env.get(ENV_MGMT_ENDPOINT) or None,
        auth_token=env.get(ENV_AUTH_TOKEN) or None,
        auth_token_secret=env.get(ENV_AUTH_TOKEN_SECRET) or None,
        require_token=_truthy(env.get(ENV_REQUIRE_TOKEN)),
        local=_truthy(env.get(ENV_LOCAL)),
        aws_endpoint=env.get(ENV_ENDPOINT) or None,
        deferred_call_arn=env.get(ENV_DEFERRED_SFN) or None,
        agent_turn_arn=env.get(ENV_AGENT_TURN_SFN) or None,
        default_model=env.get(ENV_DEFAULT_MODEL) or None,
        data_dir=env.get(ENV_DATA_DIR) or None,
    )


def reset_settings() -> None:
    """Forget cached settings (tests and the local gateway change the environment)."""
    get_settings.cache_clear()

"""`POST /api/v1/pair/exchange {code, name?}`: a new device swaps a one-time pairing code for its own device token
(ADR 0043), without anyone copying a secret to it.

The one route under `/api/v1` that takes no bearer (the code is the credential). A code is 8 characters, valid 10
minutes, used once (the exchange deletes it in the request that reads it). A wrong, used or expired code is 401
and counts against the peer like a wrong token (`runtime.attempts`): after 10 within a minute the peer is answered
429 for a minute before its code is looked at. The answer `{token, tokenId, role, binding}` holds the token once.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from orbital.engines import device_auth
from orbital.ports.services import Services
from orbital.rest.deps import ServicesDep
from orbital.runtime.attempts import ATTEMPTS, PEER_UID, TOO_MANY, peer_key

router = APIRouter()

PATH = "/api/v1/pair/exchange"
WRONG_CODE = "Invalid, used or expired pairing code"


class PairExchangeBody(BaseModel):
    code: str = Field(max_length=32, description="The one-time code `device.pair.create` gave (any case)")
    name: str | None = Field(None, max_length=64, description="What to call the device (else the code's name)")


class PairExchangeAnswer(BaseModel):
    token: str
    tokenId: str
    role: str
    binding: dict[str, str]


def _exchange(services: Services, body: PairExchangeBody, peer: str | None) -> dict[str, Any]:
    if ATTEMPTS.blocked(peer):
        raise HTTPException(429, TOO_MANY, headers={"Retry-After": "60"})
    made = device_auth.exchange(services, body.code, body.name)
    if made is None:
        ATTEMPTS.failed(peer)
        raise HTTPException(401, WRONG_CODE)
    device, token = made
    return {"token": token, "tokenId": device.token_id, "role": device.role, "binding": dict(device.binding)}


@router.post(
    PATH,
    tags=["device"],
    summary="Swap a one-time pairing code for a device token (no bearer: the code is the credential)",
    response_model=PairExchangeAnswer,
    responses={401: {"description": WRONG_CODE}, 429: {"description": TOO_MANY}},
)
async def pair_exchange(body: PairExchangeBody, request: Request, services: ServicesDep) -> dict[str, Any]:
    peer = peer_key(request.client.host if request.client else None, request.scope.get(PEER_UID))
    return await run_in_threadpool(_exchange, services, body, peer)

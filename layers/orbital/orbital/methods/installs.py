"""Methods of the `installs` family: the WindieOS installs registered on this gateway (`POST /api/install/register`),
and ending one.

An install's token names a user and reaches only WindieOS's routes and that user's conversations. Revoking an
install refuses its token from then on; a socket it already opened keeps going until it closes (at most two hours
on AWS). Changing the gateway token ends every install at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.domain import roles
from orbital.errors import BadRequestError, NotFoundError
from orbital.protocol.params import Text
from orbital.protocol.registry import CLIENT, NoParams, Params, Result, Router
from orbital.store import installs

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext

router = Router("installs")


class InstallEntry(Result):
    installId: str
    userId: str
    operatingSystem: str
    createdAt: int


class InstallListResult(Result):
    installs: list[InstallEntry]
    count: int


class InstallRevokeParams(Params):
    installId: Text = None


class InstallRevokeResult(Result):
    revoked: bool
    installId: str


@router.method("installs.list", params=NoParams, result=InstallListResult, modes=CLIENT, scope=roles.ADMIN)
def installs_list(ctx: CallContext, params: NoParams) -> dict[str, Any]:
    """Every registered WindieOS install (never its token), the oldest first."""
    found = installs.listing(ctx.services.table)
    entries = [
        {
            "installId": i.install_id,
            "userId": i.user_id,
            "operatingSystem": i.operating_system,
            "createdAt": i.created_at_ms,
        }
        for i in found
    ]
    return {"installs": entries, "count": len(entries)}


@router.method(
    "installs.revoke", params=InstallRevokeParams, result=InstallRevokeResult, modes=CLIENT, scope=roles.ADMIN
)
def installs_revoke(ctx: CallContext, params: InstallRevokeParams) -> dict[str, Any]:
    """End an install: its token is refused from now on (sockets it already opened run until they close)."""
    install_id = params.installId
    if not install_id:
        raise BadRequestError("installId required")
    if not installs.revoke(ctx.services.table, install_id):
        raise NotFoundError(f"No install {install_id}")
    return {"revoked": True, "installId": install_id}

"""The ports a method handler uses, and the repositories built on them once per warm container (or once per local
gateway).

`Services` is handed every port by a composition root, the only places that choose implementations (ADR 0049):
`orbital.runtime.services` on AWS (DynamoDB, S3, API Gateway's management API) and `orbital.local.services` for the
local gateway (its data directory's SQLite table and files, its bridge). A port the root wants built only on first
use (kept off a Lambda's cold start) comes wrapped in `Lazy`. Besides the ports this holds the method registry, so
the runtime and the engines reach the families' hooks (`hooks`) without importing the families themselves: nothing
here imports a method family, a backend or an AWS client.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from orbital.ports.capabilities import Capabilities
from orbital.ports.lifecycle import disconnect
from orbital.settings import Settings
from orbital.store import http_answers
from orbital.store.config_repo import ConfigRepo
from orbital.store.connections import ConnectionRepo
from orbital.store.table import Table

if TYPE_CHECKING:
    from orbital.ports.backups import Backups
    from orbital.ports.sender import Sender
    from orbital.ports.workflows import Workflows
    from orbital.protocol.registry import Hooks, Registry
    from orbital.store.calls import CallRepo
    from orbital.store.cron_jobs import CronRepo
    from orbital.store.heartbeats import HeartbeatRepo
    from orbital.store.last_active import LastActiveRepo
    from orbital.store.pairs import PairingRepo
    from orbital.store.portable import Items, Objects
    from orbital.store.sessions import SessionRepo
    from orbital.store.spend import SpendRepo
    from orbital.store.transfers import TransferRepo
    from orbital.store.usage import UsageRepo
    from orbital.store.workspace import Workspace

T = TypeVar("T")


class Lazy(Generic[T]):
    """A port its composition root builds on its first use (a client that a warm container may never need)."""

    def __init__(self, make: Callable[[], T]) -> None:
        self.make = make


def _built(port: T | Lazy[T]) -> T:
    return port.make() if isinstance(port, Lazy) else port


class Services:
    def __init__(
        self,
        settings: Settings,
        *,
        registry: Registry | Callable[[], Registry],
        table: Table | Lazy[Table],
        workspace: Workspace | Lazy[Workspace],
        sender: Sender | Lazy[Sender],
        workflows: Workflows | Lazy[Workflows],
        backups: Backups | None,
        portable: Callable[[], tuple[Items, Objects]],
        capabilities: Capabilities,
    ) -> None:
        """`registry`: the method registry, or what makes it on first use (so a container that never needs the
        families' hooks never assembles them). `table`, `workspace`, `sender`, `workflows`: the stores, the way
        to the sockets and the state machines' executions. `backups`: the local backups' engine (the local
        gateway's; None on AWS). `portable`: what opens that table and workspace as the portable archive's stores
        (`portable_stores`). `capabilities`: what the place this runs in can do (`orbital.ports.capabilities`)."""
        self.settings = settings
        self._table = table
        self._workspace = workspace
        self._sender: Sender | Lazy[Sender] = sender
        self._workflows = workflows
        self._portable = portable
        self.backups = backups
        """The local backups (ADR 0047): given by the local gateway; None on AWS."""
        self.capabilities = capabilities
        self._registry: Registry | None = None
        self._make_registry: Callable[[], Registry] | None = None
        if callable(registry):
            self._make_registry = registry
        else:
            self._registry = registry
        self.armed_timers: set[int] = set()
        """Seconds whose timer of due calls this container has started (`engines.deferred.start_wait`)."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    @property
    def registry(self) -> Registry:
        """The method registry this Services was given (made on first use when it was given as a callable)."""
        if self._registry is None:
            assert self._make_registry is not None
            self._registry = self._make_registry()
        return self._registry

    @property
    def hooks(self) -> Hooks:
        """The families' hooks: socket loss, node connect, deferred-call kinds, chunk frames, workflow steps."""
        return self.registry.hooks

    @functools.cached_property
    def table(self) -> Table:
        return _built(self._table)

    @functools.cached_property
    def workflows(self) -> Workflows:
        """The state machines' executions (the Workflows port)."""
        return _built(self._workflows)

    @functools.cached_property
    def config(self) -> ConfigRepo:
        return ConfigRepo(self.table, default_model=self.settings.default_model)

    @functools.cached_property
    def connections(self) -> ConnectionRepo:
        return ConnectionRepo(self.table, self.settings.connection_ttl_seconds)

    @functools.cached_property
    def sessions(self) -> SessionRepo:
        from orbital.store.sessions import SessionRepo  # lazy: built on first use, off the cold start

        return SessionRepo(self.table, self.workspace)

    @functools.cached_property
    def workspace(self) -> Workspace:
        return _built(self._workspace)

    @functools.cached_property
    def calls(self) -> CallRepo:
        """Deferred calls' items (`engines.deferred` keeps the rules)."""
        from orbital.store.calls import CallRepo  # lazy: built on first use, off the cold start

        return CallRepo(self.table, lambda: self.workspace)

    @functools.cached_property
    def transfers(self) -> TransferRepo:
        """Active transfers' items (`engines.transfer` keeps the protocol)."""
        from orbital.store.transfers import TransferRepo  # lazy: built on first use, off the cold start

        return TransferRepo(self.table)

    @functools.cached_property
    def pairs(self) -> PairingRepo:
        """Pending pairings of channel senders."""
        from orbital.store.pairs import PairingRepo  # lazy: built on first use, off the cold start

        return PairingRepo(self.table)

    @functools.cached_property
    def heartbeats(self) -> HeartbeatRepo:
        """Each agent's heartbeat state."""
        from orbital.store.heartbeats import HeartbeatRepo  # lazy: built on first use, off the cold start

        return HeartbeatRepo(self.table)

    @functools.cached_property
    def last_active(self) -> LastActiveRepo:
        """Where each agent was last talked to."""
        from orbital.store.last_active import LastActiveRepo  # lazy: built on first use, off the cold start

        return LastActiveRepo(self.table)

    @functools.cached_property
    def cron(self) -> CronRepo:
        """Cron jobs and their run history."""
        from orbital.store.cron_jobs import CronRepo  # lazy: built on first use, off the cold start

        return CronRepo(self.table)

    @functools.cached_property
    def usage(self) -> UsageRepo:
        """The gateway's token usage per UTC day and month (daily and monthly budgets)."""
        from orbital.store.usage import UsageRepo  # lazy: built on first use, off the cold start

        return UsageRepo(self.table)

    @functools.cached_property
    def spend(self) -> SpendRepo:
        """The gateway's spend counters in micro-dollars (spend caps, ADR 0044)."""
        from orbital.store.spend import SpendRepo  # lazy: built on first use, off the cold start

        return SpendRepo(self.table)

    def portable_stores(self) -> tuple[Items, Objects]:
        """This gateway's own table and workspace as the stores of `orbital.store.portable` (whole items and objects
        in and out, as an export or an import moves them), opened as its composition root said."""
        return self._portable()

    @property
    def sender(self) -> Sender:
        if isinstance(self._sender, Lazy):
            self._sender = self._sender.make()
        return self._sender

    def adopt_sender(self, sender: Sender) -> bool:
        """Use `sender` unless a sender is in use already (built, or given as it is): the AWS root adopts the
        management endpoint of the API that invoked it when none was configured. Whether it was adopted."""
        if not isinstance(self._sender, Lazy):
            return False
        self._sender = sender
        return True

    def push(self, connection_id: str, frame: dict[str, Any]) -> bool:
        """Send a frame; a gone socket (410) is cleaned up and reported as False. A reply too large to send goes
        as a 413 error reply instead (the sender sees to it, on what it posts). An HTTP request's waiter id is no
        socket: nothing is posted to it (its answers are kept for it: `engines.deferred.answer`)."""
        if http_answers.is_waiter(connection_id):
            return False
        if self.sender.post(connection_id, frame):
            return True
        disconnect(self, connection_id)
        return False

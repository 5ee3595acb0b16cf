"""`orbital dev`: the whole gateway in one process, no AWS account, no Docker.

The table on SQLite and the workspace on files in a data directory (`orbital.local.store`), the Step Functions
interpreter, the API-Gateway-like WebSocket bridge and the FastAPI app on one port. `local_state` opens a data
directory's state without a gateway, for the tools that read or write it (`orbital export` / `orbital import`).

The gateway's parts are imported inside the methods that use them, for two reasons: `orbital export`, `import` and
`backup` load this module for `local_state` alone, and the parts that take Powertools' settings when first imported
(the service's logger and metrics: level, service name, metrics off) must come after `_environment` has set them.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orbital.local import frontdoor, peer_uid, ttl
from orbital.protocol import local_token
from orbital.store.backends import private

if TYPE_CHECKING:
    from orbital.local.store import LocalStore

log = logging.getLogger("orbital.local")

LOCAL_TABLE = "orbital-local"
LOCAL_BUCKET = "orbital-local-workspace"
STAGE = "local"


class StartupError(RuntimeError):
    pass


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def find_project_root(start: Path | None = None) -> Path:
    """The directory holding template.yaml (the working directory or one of its parents)."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "template.yaml").exists() and (candidate / "functions").is_dir():
            return candidate
    raise StartupError("template.yaml not found: run `orbital dev` from an Orbital checkout (or pass --project DIR)")


@dataclass
class GatewayOptions:
    host: str = "127.0.0.1"
    port: int = 8765
    data_dir: Path = Path("~/.orbital")
    token: str | None = None
    auth: str = frontdoor.SAME_USER
    """Without `token`: `token` draws one at the first start and keeps it in `<data_dir>/token` (what `orbital dev`
    does); `same-user` serves only this process's OS user on this machine, token-less (`orbital.local.frontdoor`).
    With `token` the mode is `token`."""
    project: Path | None = None
    persist: bool = True
    durable: bool = True
    """Every acknowledged write is on disk (fsync) before it is answered. Off only to measure the cost."""
    quiet: bool = False
    step_functions_process: bool = True
    """Interpret the state machines in a child process (orbital.local.sfn_worker), off this one's GIL. Off: in
    process, as before ADR 0017 (to measure the difference)."""
    tick_interval: float = 1.0
    """Seconds between scheduler ticks (AWS ticks once a minute; locally cron and heartbeats fire on time).
    0 turns the ticker off."""
    seed: bool = True
    """Write the starter workspace files a new agent gets."""
    concurrent_frames: bool = False
    """Handle the text frames of one socket concurrently, as API Gateway does (see `orbital.local.bridge`)."""
    frame_jitter_ms: float = 0.0
    """With `concurrent_frames`: delay each frame by up to this many milliseconds, to shuffle them."""
    xeno: bool = True
    """Serve xeno's Unix socket (`orbital.local.xeno_socket`)."""
    xeno_home: Path | None = None
    """Where xeno's socket goes: `<xeno_home>/.xeno/gateway.sock` (default: the data directory)."""
    greet_after_ms: float = 250.0
    """Without a token: a socket silent this long after its upgrade gets Exoclaw's unprompted hello (clients of the
    other dialects speak at once and never see it; Exoclaw's waits 800 ms). 0 turns it off."""


class LocalGateway:
    def __init__(self, options: GatewayOptions) -> None:
        self.options = options
        self.data_dir = options.data_dir.expanduser().resolve()
        self.root = options.project.resolve() if options.project else find_project_root()
        self.stack: Any = None
        self.bridge: Any = None
        self.sender: Any = None
        """The bridge's Sender (`orbital.local.sender.BridgeSender`), posting once the bridge is set."""
        self.store: Any = None
        """The data directory's table and workspace (`orbital.local.store.LocalStore`)."""
        self._runtime_written = False
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.ticker: Ticker | None = None
        self.port = options.port
        self._socket: socket.socket | None = None
        self._umask: int | None = None
        self._refusals_logged: set[str] = set()
        self.token: str | None = options.token
        """The token clients present (given, or kept in the data directory); None in `same-user` mode."""
        self.token_created = False
        """This start drew the token (the data directory had none)."""
        self.services: Any = None
        """This gateway's Services (`orbital.local.services`), installed for the handlers it invokes."""
        self.backups: Any = None
        """The data directory's backups and their schedule (`orbital.local.backup.LocalBackups`); None without
        persistence."""
        self.xeno: Any = None
        """xeno's Unix socket (`orbital.local.xeno_socket.XenoSocket`), when served."""

    # --- lifecycle ----------------------------------------------------------------------------------------------

    @property
    def auth(self) -> str:
        """`token` or `same-user`."""
        return frontdoor.TOKEN if self.options.token else self.options.auth

    def check(self) -> None:
        """Refuse options that cannot work, before anything is created: one line saying what to change."""
        if self.options.auth not in frontdoor.MODES:
            raise StartupError(f"unknown auth mode {self.options.auth!r}: use one of {', '.join(frontdoor.MODES)}")
        if not 0 <= self.options.port <= 65535:
            raise StartupError(f"port {self.options.port} is out of range: PORT= takes 1 to 65535")
        if self.data_dir.exists() and not self.data_dir.is_dir():
            raise StartupError(f"the data directory {self.data_dir} is a file: DATA_DIR= names a directory")
        if self.options.token:
            why = local_token.too_short(self.options.token)
            if why:
                raise StartupError(why)
        if self.auth == frontdoor.SAME_USER:
            if not is_loopback(self.options.host):
                raise StartupError(
                    f"refusing to listen on {self.options.host} without a token: AUTH=same-user serves this machine "
                    "only. Bind 127.0.0.1, or start without AUTH=same-user (a token is kept in the data directory)."
                )
            why = peer_uid.unsupported()
            if why:
                raise StartupError(
                    f"AUTH=same-user cannot start here: {why}. Start without it (a token is kept in the data "
                    "directory)."
                )

    def _bind(self) -> None:
        """Take the port now (handed to uvicorn), so a busy one is told before anything is created."""
        try:
            self._socket = _listen(self.options.host, self.options.port)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise StartupError(
                    f"port {self.options.port} is in use: PORT=… (orbital dev --port …) picks another"
                ) from None
            raise StartupError(f"cannot listen on {self.options.host}:{self.options.port}: {exc.strerror}") from None
        self.port = int(self._socket.getsockname()[1])

    def _use_token(self) -> None:
        """In `token` mode without a given token: the data directory's own, drawn at its first start."""
        if self.auth != frontdoor.TOKEN or self.token:
            return
        try:
            self.token, self.token_created = local_token.ensure_token(self.data_dir)
        except (local_token.TokenFileError, OSError) as exc:
            raise StartupError(str(exc)) from None

    def prepare(self) -> None:
        """Open the data directory's store, start the Step Functions interpreter, configure the handlers."""
        self.check()
        # lazy: see the module's docstring
        from orbital.local.stack import LocalStack

        self._bind()  # bound here and handed to uvicorn, so no other process can take it in between
        self._umask = os.umask(0o077)  # every file this gateway writes is its owner's alone (restored at shutdown)
        self._open_store()
        self._use_token()  # with the directory held: two gateways starting on it never both draw one
        log.info("%s: %s", self.data_dir, self.store.describe())
        self.stack = LocalStack(
            self.root, self.root / "template.yaml", step_functions_process=self.options.step_functions_process
        )
        self.stack.start()
        self._configure_env(self.stack.endpoint)
        self._compose()
        if self.options.seed:
            self._seed()
        self.bridge = self._make_bridge()
        if self.options.xeno:
            self._make_xeno()
        self.sender.bridge = self.bridge
        if self.options.persist:
            # lazy: see the module's docstring
            from orbital.local.restart import end_interrupted

            end_interrupted(self.services)
        self._start_schedules()
        self._write_runtime()

    def _open_store(self) -> None:
        """The data directory's table and workspace, the directory taken (and made private) for this gateway."""
        # lazy: see the module's docstring
        from orbital.local.store import DataDirLockedError, LocalStore

        tightened = private.make_private(self.data_dir)
        if tightened:
            log.warning("%s was readable by other users: made it private (%s)", self.data_dir, tightened)
        try:
            self.store = LocalStore.open(
                self.data_dir,
                durable=self.options.durable,
                temporary=not self.options.persist,
                base_url=self.http_url,
            )
        except DataDirLockedError as exc:
            raise StartupError(str(exc)) from None

    def _compose(self) -> None:
        """This gateway's Services, from its composition root (`orbital.local.services`), installed for the
        handlers it invokes; with persistence, the data directory's backups (ADR 0047) among them."""
        # lazy: see the module's docstring
        from orbital.local.services import build_local_services
        from orbital.runtime.services import use_services
        from orbital.settings import get_settings

        if self.options.persist:
            # lazy: see the module's docstring
            from orbital.local.backup import LocalBackups

            self.backups = LocalBackups(self.store, self.data_dir, lambda: self.services.config.effective())
        self.services = build_local_services(
            get_settings(), self.store, workflows=self.stack.workflows, backups=self.backups
        )
        self.sender = self.services.sender  # the bridge's: it posts once the bridge is set (`prepare`)
        use_services(self.services)

    def _make_bridge(self) -> Any:
        """The API-Gateway-like WebSocket bridge, with the HTTP app mounted beside it."""
        # lazy: see the module's docstring
        from orbital.local.bridge import Bridge
        from orbital.local.template import websocket_routes
        from orbital.rest.app import create_app
        from orbital.runtime.gateway import greet

        return Bridge(
            self.stack.functions.invoke,
            websocket_routes(self.stack.template),
            stage=STAGE,
            domain=f"{self.options.host}:{self.port}",
            rest_app=create_app(),
            concurrent_frames=self.options.concurrent_frames,
            frame_jitter_ms=self.options.frame_jitter_ms,
            # methods that post to sockets too, when those posts and every AWS call are answered in this process
            inline_methods=self.services.registry.event_loop_methods(posts_in_process=True),
            connect_inline=not self.token,
            greet=greet,
            greet_after_s=0.0 if self.token else self.options.greet_after_ms / 1000,
        )

    def _make_xeno(self) -> None:
        # lazy: see the module's docstring
        from orbital.local.xeno_socket import XenoSocket, XenoSocketInUseError

        self.xeno = XenoSocket(self.options.xeno_home or self.data_dir, self.bridge, self.token)
        try:
            self.xeno.check()
        except XenoSocketInUseError as exc:
            self.xeno = None
            raise StartupError(str(exc)) from None

    def _start_schedules(self) -> None:
        """The scheduled functions and the housekeeping (`Ticker`), and the backups' schedule."""
        # lazy: see the module's docstring
        from orbital.local import template as tpl

        if self.options.tick_interval > 0:
            self.ticker = Ticker(
                self.stack.functions,
                tpl.schedules(self.stack.template),
                self.options.tick_interval,
                housekeeping=self._delete_expired,
                housekeeping_every=ttl.SWEEP_EVERY_S,
            )
            self.ticker.start()
        if self.backups is not None:
            self.backups.start()

    def _delete_expired(self) -> int:
        """DynamoDB's TTL deletes, locally (`orbital.local.ttl`)."""
        # lazy: see the module's docstring
        from orbital.local import template as tpl

        attribute = tpl.ttl_attribute(self.stack.template) if self.stack is not None else None
        return ttl.sweep(self.services.table, attribute, time.time()) if attribute else 0

    @property
    def runtime_file(self) -> Path:
        return self.data_dir / "runtime.json"

    def _write_runtime(self) -> None:
        """Where this gateway listens (for `orbital` tooling on the same machine)."""
        import json

        info = {"pid": os.getpid(), "wsUrl": self.ws_url, "httpUrl": self.http_url}
        private.write_private(self.runtime_file, json.dumps(info, indent=2).encode())
        self._runtime_written = True

    def _configure_env(self, endpoint: str) -> None:
        # the management endpoint is only a name here: the local Sender posts to the bridge itself
        mgmt = f"http://127.0.0.1:{self.port}/{STAGE}"
        env = {
            "ORBITAL_TABLE": LOCAL_TABLE,
            "ORBITAL_BUCKET": LOCAL_BUCKET,
            "ORBITAL_STAGE": STAGE,
            "ORBITAL_LOCAL": "1",
            "ORBITAL_DATA_DIR": str(self.data_dir),
            "ORBITAL_AWS_ENDPOINT": endpoint,
            "ORBITAL_WS_MGMT_ENDPOINT": mgmt,
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "POWERTOOLS_METRICS_DISABLED": "true",
            "POWERTOOLS_TRACE_DISABLED": "true",
            "AWS_XRAY_SDK_ENABLED": "false",
            "POWERTOOLS_LOG_LEVEL": os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING"),
            "POWERTOOLS_SERVICE_NAME": "orbital",
        }
        for var in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
            os.environ.pop(var, None)
        os.environ.update(env)
        import warnings

        warnings.filterwarnings("ignore", message="No application metrics to publish")
        # lazy: see the module's docstring
        from orbital.settings import ENV_AGENT_TURN_SFN, ENV_DEFERRED_SFN

        machine_env = {"DeferredCallStateMachine": ENV_DEFERRED_SFN, "AgentTurnStateMachine": ENV_AGENT_TURN_SFN}
        for logical_id, arn in self.stack.state_machine_arns.items():
            if logical_id in machine_env:
                os.environ[machine_env[logical_id]] = arn
        if self.token:
            os.environ["ORBITAL_AUTH_TOKEN"] = self.token
        else:
            os.environ.pop("ORBITAL_AUTH_TOKEN", None)
        os.environ.pop("ORBITAL_REQUIRE_TOKEN", None)
        # lazy: see the module's docstring
        from orbital.aws.clients import reset_clients
        from orbital.runtime.services import reset_services
        from orbital.settings import reset_settings

        reset_settings()
        reset_clients()
        reset_services()

    def _seed(self) -> None:
        try:
            # lazy: see the module's docstring
            from orbital.agent.seed import ensure_seeded
        except ImportError:
            return
        written = ensure_seeded(self.services)
        if written:
            log.info("seeded the workspace: %s", ", ".join(written))

    def _uvicorn(self) -> Any:
        import uvicorn

        # lazy: see the module's docstring
        from orbital.local.bridge import websocket_protocol

        app = self._with_object_urls(self.bridge.app())
        app = frontdoor.guard(app, mode=self.auth, on_refused=self._refused)
        if self.xeno is not None:
            # lazy: see the module's docstring
            from orbital.local.xeno_socket import lifespan

            app = lifespan(app, [self.xeno.start], [self.xeno.stop])
        config = uvicorn.Config(
            app,
            host=self.options.host,
            port=self.port,
            log_level="warning",
            ws=websocket_protocol(),
            ws_max_size=16 * 1024 * 1024,
            ws_per_message_deflate=False,  # API Gateway does not compress WebSocket messages either
            ws_ping_interval=20,
            ws_ping_timeout=20,
            lifespan="on" if self.xeno is not None else "off",
            access_log=False,
            proxy_headers=False,  # the peer is who connected: no forwarded address may stand in for it
        )
        return uvicorn.Server(config)

    def _with_object_urls(self, app: Any) -> Any:
        """`app`, serving the presigned URLs of the workspace under `/_objects/` when it is on files."""
        # lazy: see the module's docstring
        from orbital.local.object_urls import ObjectRoute, mount
        from orbital.store.backends.files import FileWorkspace

        workspace = self.services.workspace
        return mount(app, ObjectRoute(workspace)) if isinstance(workspace, FileWorkspace) else app

    def _refused(self, why: str) -> None:
        """A request refused at the front door (logged once per kind of reason, so a flood does not fill the log)."""
        if why not in self._refusals_logged and len(self._refusals_logged) < 64:
            self._refusals_logged.add(why)
            log.warning("refused a request %s (auth mode %s)", why, self.auth)

    @property
    def ws_url(self) -> str:
        return f"ws://{self.options.host}:{self.port}/ws"

    @property
    def http_url(self) -> str:
        return f"http://{self.options.host}:{self.port}"

    def banner(self) -> str:
        if self.token:
            # the token in the fragment: browsers never send it (no request line, log or Referer holds it)
            console = f"{self.http_url}/#token={self.token}   (open it in a browser: it signs you in)"
            auth = f"token required: kept in {self.data_dir / local_token.TOKEN_FILE}"
            if self.options.token:
                auth = "token required: the one it was started with"
        else:
            console = f"{self.http_url}/   (open it in a browser)"
            auth = "no token: this OS user on this machine only (AUTH=same-user)"
        return "\n".join(
            [
                "Orbital gateway is running",
                f"  Console    {console}",
                f"  WebSocket  {self.ws_url}   ({auth})",
                f"  HTTP API   {self.http_url}/docs",
                f"  Data       {self.data_dir}",
                "`orbital call`, `chat`, `node` … run by this user find the gateway's token by themselves.",
                "Press Ctrl-C to stop.",
            ]
        )

    def serve_forever(self) -> None:
        """Run in the foreground until Ctrl-C / SIGTERM, then save state and stop."""
        import signal

        def _terminate(_signum: int, _frame: Any) -> None:
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, _terminate)
        self.prepare()
        self._server = self._uvicorn()
        started = threading.Thread(target=self._announce, daemon=True)
        started.start()
        try:
            self._server.run(sockets=self._sockets())
        finally:
            self.shutdown()

    def _announce(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._server is not None and self._server.started:
                print(self.banner(), flush=True)
                return
            time.sleep(0.02)

    def start(self) -> LocalGateway:
        """Run in a background thread (tests, benchmarks). Returns once the socket accepts connections."""
        self.prepare()
        self._server = self._uvicorn()
        self._server.install_signal_handlers = lambda: None
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": self._sockets()}, name="orbital-uvicorn", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise StartupError("local gateway did not start")
            time.sleep(0.01)
        return self

    def _sockets(self) -> list[socket.socket] | None:
        """The listening socket bound for `--port 0`; None lets uvicorn bind host and port itself."""
        return [self._socket] if self._socket is not None else None

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
            self._thread = None
        self.shutdown()

    def shutdown(self) -> None:
        if self.bridge is not None:
            self.bridge.close()
        if self.ticker is not None:
            self.ticker.stop()
            self.ticker = None
        if self.backups is not None:
            self.backups.stop()
            self.backups = None
        if self._runtime_written:  # never another gateway's (one that holds the data directory)
            self.runtime_file.unlink(missing_ok=True)
            self._runtime_written = False
        if self.stack is not None:
            self.stack.stop()
            self.stack = None
        if self.services is not None:
            # lazy: see the module's docstring
            from orbital.runtime.services import use_services

            use_services(None)
            self.services = None
        if self.store is not None:
            try:
                self.store.close()
            finally:
                self.store = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._umask is not None:
            os.umask(self._umask)
            self._umask = None


class Ticker:
    """Invokes the template's scheduled functions (EventBridge schedules on AWS) every `interval` seconds, and
    `housekeeping` (what AWS does by itself, such as deleting expired items) every `housekeeping_every` seconds."""

    def __init__(
        self,
        functions: Any,
        schedules: list[dict[str, Any]],
        interval: float,
        *,
        housekeeping: Callable[[], Any] | None = None,
        housekeeping_every: float = 60.0,
    ) -> None:
        self.functions = functions
        self.targets = sorted({s["function"] for s in schedules})
        self.interval = interval
        self.housekeeping = housekeeping
        self.housekeeping_every = housekeeping_every
        self._kept_at = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="orbital-ticker", daemon=True)

    def start(self) -> None:
        if self.targets or self.housekeeping is not None:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def tick(self) -> None:
        for logical_id in self.targets:
            event = {"source": "aws.scheduler", "detail-type": "Scheduled Event", "detail": {}}
            try:
                self.functions.invoke(logical_id, event, count=False)
            except Exception:
                log.exception("scheduled function %s failed", logical_id)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.tick()
            if self.housekeeping is not None and time.monotonic() - self._kept_at >= self.housekeeping_every:
                self._kept_at = time.monotonic()
                try:
                    self.housekeeping()
                except Exception:
                    log.exception("housekeeping failed")


@contextlib.contextmanager
def local_state(data_dir: Path, *, exclusive: bool = True) -> Iterator[LocalStore]:
    """The table and workspace kept in `data_dir`, opened in this process without a gateway: for tools that read them
    (`orbital export`) or write them (`orbital import`); closed when the block ends. `exclusive`: the directory is
    taken (StartupError when a gateway or another tool has it), created or tightened to its owner as the gateway does
    it; off: opened beside the gateway running on it, to read. What is written is on disk when it returns, and
    readable by its owner only."""
    # lazy: see the module's docstring
    from orbital.local.store import DataDirLockedError, LocalStore

    data_dir = data_dir.expanduser()
    umask = os.umask(0o077)
    try:
        if exclusive:
            tightened = private.make_private(data_dir)
            if tightened:
                log.warning("%s was readable by other users: made it private (%s)", data_dir, tightened)
        try:
            store = LocalStore.open(data_dir, exclusive=exclusive)
        except DataDirLockedError as exc:
            raise StartupError(str(exc)) from None
        try:
            yield store
        finally:
            store.close()
    finally:
        os.umask(umask)


def _listen(host: str, port: int = 0) -> socket.socket:
    """A socket listening on `host`:`port` (0: a port the system picks)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=2048)

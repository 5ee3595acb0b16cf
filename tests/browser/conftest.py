"""The console in a real browser: headless Chromium (the system's, Debian's `chromium` package) driven by Playwright,
against a real `orbital dev` in a subprocess with a token, the scripted model on loopback and a real `orbital node`.

A machine without Chromium fails these tests with how to install it (`.ci/run` installs it): they never skip.
`ORBITAL_CHROMIUM` names another Chromium binary."""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.client import GatewayClient
from playwright.sync_api import Page, expect

from tests.conftest import wait_for
from tests.e2e.conftest import GatewayProcess, NodeProcess
from tests.support.agent import configure_fake_model
from tests.support.fake_llm import FakeLLM

TOKEN = "console-test-token-0123456789abcdef"
"""The token of the module's gateway."""

CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",  # CI runs as root, where Chromium's sandbox cannot start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # no calls home: this machine's network is closed, and tests stay local
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]

SOCKET_SPY = """
window.__sockets = [];
window.__sent = [];
const Native = window.WebSocket;
window.WebSocket = class extends Native {
  constructor(...args) {
    super(...args);
    window.__sockets.push(this);
  }
  send(data) {
    window.__sent.push(data);
    super.send(data);
  }
};
"""
"""An init script that keeps every WebSocket the page opens in `window.__sockets` (so a test can drop one) and
every text it sends in `window.__sent`."""


class HeldAnswers:
    """Routes the page's socket through the test. While held, the gateway's answers to `method` are kept back (the
    call is under way for the page) until `release()` passes them on; `replace_next` makes the next answer an older
    one; `send` hands the page a frame as if the gateway had sent it."""

    def __init__(self, page: Page, method: str, *, held: bool = False) -> None:
        self.page = page
        self.method = method
        self.holding = held
        self.asked: set[str] = set()
        self.kept: list[str | bytes] = []
        self.replacement: dict[str, Any] | None = None
        self.replacing: set[str] = set()
        self.events: list[str] = []
        """The events the gateway sent the page, by name, in order."""
        self.page_socket: Any = None
        page.route_web_socket(re.compile(r"/ws$"), self._route)

    def _route(self, ws: Any) -> None:
        self.page_socket = ws
        server = ws.connect_to_server()
        ws.on_message(lambda message: self._from_page(server, message))
        server.on_message(self._from_server)

    def _from_page(self, server: Any, message: str | bytes) -> None:
        frame = json.loads(message)
        if frame.get("type") == "req" and frame.get("method") == self.method:
            if self.replacement is not None:
                self.replacing.add(frame["id"])
            elif self.holding:
                self.asked.add(frame["id"])
        server.send(message)

    def _from_server(self, message: str | bytes) -> None:
        frame = json.loads(message)
        if frame.get("type") == "res" and frame.get("id") in self.replacing and self.replacement is not None:
            self.replacing.discard(frame["id"])
            message = json.dumps({"type": "res", "id": frame["id"], "ok": True, "payload": self.replacement})
            self.replacement = None
        if frame.get("type") == "res" and frame.get("id") in self.asked:
            self.asked.discard(frame["id"])
            self.kept.append(message)
            return
        if frame.get("type") == "evt":
            self.events.append(str(frame.get("event")))
        self.page_socket.send(message)

    def replace_next(self, payload: dict[str, Any]) -> None:
        """The gateway's next answer to `method` reaches the page as `payload` instead (what an earlier read said)."""
        self.replacement = payload

    def hold(self) -> None:
        self.holding = True

    def wait_until(self, predicate: Callable[[], object], what: str, timeout: float = 10.0) -> None:
        """Until `predicate()` holds. The page is waited on meanwhile, which is what serves the routes (a plain
        sleep would not)."""
        wait_for(predicate, timeout, what=what, sleep=lambda seconds: self.page.wait_for_timeout(seconds * 1000))

    def wait_kept(self) -> None:
        """Until the gateway has answered a held call."""
        self.wait_until(lambda: self.kept, f"the gateway's answer to the held {self.method}")

    def send(self, frame: dict[str, Any]) -> None:
        self.page_socket.send(json.dumps(frame))

    def release(self) -> None:
        """Pass the kept answers on, and stop holding. Returns once the page has handled them (a frame and a task
        later: they are delivered as they are sent)."""
        self.holding = False
        for message in self.kept:
            self.page_socket.send(message)
        self.kept.clear()
        self.page.evaluate("() => new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)))")


WAIT_MS = 20_000
"""How long an action or an `expect` waits for the page (a deadline, not a measure: an agent run on a loaded CI
machine takes seconds). Playwright's own default for `expect` is 5 s."""
expect.set_options(timeout=WAIT_MS)

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 860}


def chromium_executable() -> str:
    given = os.environ.get("ORBITAL_CHROMIUM")
    if given:
        return given
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(
        "Chromium is not installed, and the console's tests need it: `apt-get install chromium` (Debian; .ci/run "
        "does it), or set ORBITAL_CHROMIUM to a Chromium binary",
        pytrace=False,
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium for one test module. Not for the session: Playwright's synchronous API keeps an asyncio loop
    running on this thread while it is started, which would break every later test in this worker that runs a loop
    of its own (Mangum, asyncio.run)."""
    from playwright.sync_api import sync_playwright

    executable = chromium_executable()
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM) -> Iterator[GatewayProcess]:
    """One gateway with a token per test module, its model the scripted one."""
    gw = GatewayProcess(tmp_path_factory.mktemp("console") / "data", token=TOKEN).start()
    try:
        with GatewayClient(gw.url, timeout=15) as admin:
            admin.connect("client", "console-admin", token=TOKEN)
            configure_fake_model(admin, llm.base_url)
        yield gw
    finally:
        gw.stop()


@pytest.fixture
def fake(llm: FakeLLM) -> Iterator[FakeLLM]:
    llm.reset()
    yield llm
    llm.reset()


@pytest.fixture
def admin(gateway: GatewayProcess) -> Iterator[GatewayClient]:
    """A plain GSV client on the same gateway, to set things up and to check what the console did."""
    with GatewayClient(gateway.url, timeout=20) as c:
        c.connect("client", f"admin-{uuid.uuid4().hex[:6]}", token=TOKEN)
        yield c


@pytest.fixture(scope="module")
def node(gateway: GatewayProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """A real `orbital node` connected to the module's gateway."""
    started = NodeProcess(gateway, "laptop", tmp_path_factory.mktemp("node") / "ws").start()
    yield started
    started.stop()


class Console:
    """One browser tab on the console, with every request it made recorded (to prove nothing left the gateway)."""

    def __init__(self, page: Any, base: str) -> None:
        self.page = page
        self.base = base
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.trace: list[str] = []
        """What the page said and what went over its sockets (frame kinds and names, never their contents), in
        order: shown with a failed test's report."""
        page.on("request", lambda request: self.requests.append(request.url))
        page.on("pageerror", lambda exc: self._error(f"page error: {exc}"))
        page.on("console", self._console)
        page.on("websocket", self._socket)

    def _error(self, text: str) -> None:
        self.errors.append(text)
        self.trace.append(text)

    def _console(self, msg: Any) -> None:
        if msg.type == "error":
            self.errors.append(msg.text)
        self.trace.append(f"console.{msg.type}: {msg.text}")

    def _socket(self, ws: Any) -> None:
        self.trace.append(f"socket opened: {ws.url.split('?')[0]}")
        ws.on("framesent", lambda payload: self.trace.append(f"→ {frame_name(payload)}"))
        ws.on("framereceived", lambda payload: self.trace.append(f"← {frame_name(payload)}"))
        ws.on("close", lambda _: self.trace.append("socket closed"))

    def state(self) -> str:
        """Where the page is and what its view shows, for a failed test's report."""
        shown = self.page.evaluate(
            "() => [location.hash, document.getElementById('status')?.dataset.state ?? '',"
            " document.getElementById('view')?.outerHTML ?? '']"
        )
        view = re.sub(r"<svg\b.*?</svg>", "<svg/>", str(shown[2]), flags=re.DOTALL)  # icons say nothing here
        return f"address: {shown[0]}\nstatus: {shown[1]}\n{view[:6000]}"

    def open(self, hash_path: str = "", *, token: str | None = TOKEN) -> Console:
        """Open the console (at `#/…` if given) and, when it asks, give it `token`; returns once it is connected."""
        self.page.goto(f"{self.base}/{hash_path}")
        if token is not None:
            dialog = self.page.get_by_role("dialog", name="Connect to Orbital")
            dialog.get_by_label("Gateway token").fill(token)
            dialog.get_by_role("button", name="Connect").click()
        expect(self.page.locator("#status")).to_have_attribute("data-state", "open")
        return self

    def go(self, view: str) -> None:
        """Switch views with the side bar (or the tab bar on a phone)."""
        self.page.locator(f'nav a[data-view="{view}"]').click()


def frame_name(payload: str | bytes) -> str:
    """A socket frame as `req connect #1`, `res #1 ok`, `evt chat`: never its parameters (the token is in one)."""
    try:
        frame = json.loads(payload)
    except ValueError:
        return f"{len(payload)} bytes, not JSON"
    if not isinstance(frame, dict):
        return "JSON, not an object"
    kind = str(frame.get("type"))
    if kind == "req":
        return f"req {frame.get('method')} #{frame.get('id')}"
    if kind == "res":
        return f"res #{frame.get('id')} {'ok' if frame.get('ok') else 'error'}"
    return f"{kind} {frame.get('event') or ''}".rstrip()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed browser test's report shows the page's state and its trace (see `Console.trace`)."""
    report = yield
    tab = getattr(item, "console_tab", None)
    if report.when == "call" and report.failed and isinstance(tab, Console):
        try:
            report.sections.append(("console state", tab.state()))
        except Exception as exc:  # the page may be gone: the trace still helps
            report.sections.append(("console state", f"not read: {type(exc).__name__}: {exc}"))
        report.sections.append(("console trace", "\n".join(tab.trace[-300:])))
    return report


@pytest.fixture
def console(browser: Any, gateway: GatewayProcess, request: pytest.FixtureRequest) -> Iterator[Console]:
    """A fresh tab (its own sessionStorage) on a desktop-sized window, not yet opened."""
    context = browser.new_context(viewport=DESKTOP)
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    tab = Console(page, gateway.http)
    request.node.console_tab = tab  # for the report of a failure (`pytest_runtest_makereport`)
    try:
        yield tab
    finally:
        context.close()
    foreign = [url for url in tab.requests if not url.startswith((gateway.http, "ws://127.0.0.1", "data:", "blob:"))]
    assert not foreign, f"the console loaded from elsewhere: {foreign}"


def screenshot_path(name: str) -> Path:
    return Path(__file__).resolve().parents[2] / "docs" / "images" / name

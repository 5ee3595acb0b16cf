// The console's shell: reads the gateway's console settings, asks for the token when the gateway wants one (kept in
// memory, and in this tab's sessionStorage if the user allows: never localStorage, never a URL; a token handed over
// in the address's fragment, `#token=…` as `make dev` prints it, is moved there and taken out of the address bar
// before anything else runs), connects, and
// shows one view at a time by the address's hash (#/chat/<session>, #/nodes, #/workspace/<path>, #/schedules,
// #/channels, #/settings, #/devices, #/mcp, #/agents). Views are modules with `mount(container, ctx)` returning a cleanup function, or an
// object {destroy(), update(params)?, canLeave()?}: `update` takes a new sub-path without mounting again,
// `canLeave` (true, false or a Promise of either) is asked before the address leaves the view's current one (unsaved
// edits), however it changes: a link, Alt+digit, Back, or typing.

import { Approvals } from "./approvals.js";
import { Gateway } from "./gsv.js";
import { spendAlertText } from "./spend.js";
import { dialog, field, h, icon, randomId, toast } from "./ui.js";
import chat from "./views/chat.js";
import nodes from "./views/nodes.js";
import workspace from "./views/workspace.js";
import schedules from "./views/schedules.js";
import channels from "./views/channels.js";
import settings from "./views/settings.js";
import devices from "./views/devices.js";
import mcp from "./views/mcp.js";
import agents from "./views/agents.js";

const VIEWS = [chat, nodes, workspace, schedules, channels, settings, devices, mcp, agents];
const TOKEN_KEY = "orbital.console.token";
const THEME_KEY = "orbital.console.theme";

const state = { gw: null, approvals: null, config: null, view: null, cleanup: null, path: null, hash: "", leaving: false, routed: false, token: null };

/** A token in the address's fragment (`#token=…`): kept in the token store and removed from the address bar and the
 * history entry at once. Browsers never send a fragment, so it is in no request line, log or Referer. */
function takeTokenFromAddress() {
  const match = /^#token=([^&#]*)$/.exec(location.hash);
  if (!match) return null;
  history.replaceState(history.state, "", location.pathname + location.search);
  let token = "";
  try {
    token = decodeURIComponent(match[1]).trim();
  } catch {
    token = "";
  }
  if (!token) return null;
  sessionStorage.setItem(TOKEN_KEY, token);
  return token;
}
state.token = takeTokenFromAddress();

// --- theme -----------------------------------------------------------------------------------------------------

function applyTheme(theme) {
  const dark = theme === "dark" || (theme !== "light" && matchMedia("(prefers-color-scheme: dark)").matches);
  document.documentElement.dataset.theme = dark ? "dark" : "light";
  const button = document.getElementById("theme");
  if (button) {
    button.setAttribute("aria-label", dark ? "Use the light theme" : "Use the dark theme");
    button.title = button.getAttribute("aria-label");
    button.replaceChildren(icon(dark ? "sun" : "moon"));
  }
}

function toggleTheme() {
  const next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
  localStorage.setItem(THEME_KEY, next); // a preference, not a secret
  applyTheme(next);
}

// --- the token -------------------------------------------------------------------------------------------------

async function askToken(message) {
  const input = h("input", { type: "password", name: "token", autocomplete: "current-password", required: true, spellcheck: "false" });
  const remember = h("input", { type: "checkbox", name: "remember", checked: true });
  const body = [
    message ? h("p.error", { role: "alert" }, message) : null,
    h("p", "This gateway needs its token. It stays in this tab and is sent only to the gateway."),
    field("Gateway token", input),
    h("label.check", remember, " Keep it until this tab closes"),
  ];
  const ok = await dialog("Connect to Orbital", body, [{ label: "Connect", value: true, kind: "primary" }], () => Boolean(input.value.trim()));
  if (!ok) return null;
  const token = input.value.trim();
  state.token = token;
  if (remember.checked) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
  return token;
}

/** Connect, asking for the token as long as the gateway refuses it. True once connected, or while the socket
 * tries again by itself after a passing failure; false when the user gave up or the gateway refused for good. */
async function connect(message = null) {
  let token = state.config.tokenRequired ? state.token || sessionStorage.getItem(TOKEN_KEY) : null;
  for (;;) {
    if (state.config.tokenRequired && !token) {
      token = await askToken(message);
      if (!token) {
        showStatus("closed", "Not connected: the gateway needs its token.");
        return false;
      }
    }
    try {
      await state.gw.open(token);
      return true;
    } catch (err) {
      if (err.code !== 401) return state.gw.state === "reconnecting";
      sessionStorage.removeItem(TOKEN_KEY);
      state.token = null;
      state.config.tokenRequired = true;
      token = null;
      message = "That token was not accepted.";
    }
  }
}

/** The gateway stopped accepting the token after the page connected (it was changed): ask for the new one. */
async function tokenRefused() {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  state.config.tokenRequired = true;
  if (await connect("The gateway no longer accepts the token: it may have been changed.")) showViews();
  else notConnected();
}

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  state.gw.close();
  location.reload();
}

// --- status ----------------------------------------------------------------------------------------------------

const STATUS_TEXT = { open: "Connected", connecting: "Connecting…", reconnecting: "Reconnecting…", closed: "Disconnected", idle: "" };

function showStatus(stateName, detail) {
  const el = document.getElementById("status");
  el.dataset.state = stateName;
  el.textContent = STATUS_TEXT[stateName] || stateName;
  el.title = detail || STATUS_TEXT[stateName] || "";
  document.body.dataset.connection = stateName;
}

// --- the approvals badge --------------------------------------------------------------------------------------

/** On every view: how many tool calls wait for an answer, a link to the session of the oldest (hidden at none). */
function showApprovals() {
  const badge = /** @type {HTMLAnchorElement} */ (document.getElementById("approvals"));
  const waiting = state.approvals.list();
  badge.hidden = !waiting.length;
  if (!waiting.length) return;
  const oldest = waiting[0];
  const n = waiting.length;
  badge.replaceChildren(`${n}`, h("span.long", ` approval${n === 1 ? "" : "s"}`), " waiting"); // a phone: "1 waiting"
  badge.href = `#/chat/${encodeURIComponent(oldest.sessionKey || "")}`;
  badge.title = `${oldest.tool || "A tool call"} waits for your answer: open its session`;
  badge.setAttribute("aria-label", `${badge.textContent}: open the session of ${oldest.tool || "the oldest"}`);
}

// --- routing ---------------------------------------------------------------------------------------------------

function decodePart(part) {
  try {
    return decodeURIComponent(part);
  } catch {
    return part; // a malformed escape: taken as it is
  }
}

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [id, ...rest] = raw.split("/");
  return { id: id || "chat", params: rest.map(decodePart) };
}

export function navigate(id, ...params) {
  const hash = `#/${[id, ...params.map((p) => encodeURIComponent(p))].join("/")}`;
  if (location.hash !== hash) location.hash = hash;
}

async function route() {
  const { id, params } = parseHash();
  const view = VIEWS.find((v) => v.id === id) || chat;
  const container = document.getElementById("view");
  const key = `${view.id}/${params.join("/")}`;
  if (state.path === key) return;
  if (!(await mayLeave())) return;
  state.hash = location.hash;
  // a view that handles its own sub-paths gets them without being mounted again
  if (state.view === view && typeof state.cleanup?.update === "function") {
    state.path = key;
    state.cleanup.update(params);
    return;
  }
  if (state.cleanup) {
    try {
      (typeof state.cleanup === "function" ? state.cleanup : state.cleanup.destroy)?.();
    } catch (err) {
      console.error(err);
    }
  }
  state.view = view;
  state.path = key;
  container.replaceChildren();
  container.dataset.view = view.id;
  for (const link of /** @type {NodeListOf<HTMLElement>} */ (document.querySelectorAll("nav a[data-view]"))) {
    if (link.dataset.view === view.id) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  document.title = `${view.title} · Orbital`;
  state.cleanup = view.mount(container, {
    gw: state.gw,
    config: state.config,
    approvals: state.approvals,
    params,
    navigate,
  });
  /** @type {HTMLElement | null} */ (container.querySelector("[autofocus]"))?.focus();
  if (state.routed && !container.contains(document.activeElement)) focusHeading(container);
  state.routed = true;
}

/** After a switch of view, the keyboard starts at the view's heading (which a screen reader reads out). */
function focusHeading(container) {
  const heading = container.querySelector("h1") || container;
  if (!heading.hasAttribute("tabindex")) heading.setAttribute("tabindex", "-1");
  heading.focus({ preventScroll: true });
}

/** Whether the shown view lets the address change (its `canLeave`). While it asks, the address shows the view's
 * own again; once it agrees, the new address is taken again (once, without asking twice). */
async function mayLeave() {
  const ask = state.cleanup && typeof state.cleanup.canLeave === "function" ? state.cleanup.canLeave : null;
  if (!ask || state.leaving) {
    state.leaving = false;
    return true;
  }
  const answer = ask();
  if (answer === true) return true;
  const wanted = location.hash;
  history.replaceState(history.state, "", state.hash || "#/chat");
  if (!(await answer)) return false;
  state.leaving = true;
  location.hash = wanted;
  return false;
}

// --- start -----------------------------------------------------------------------------------------------------

function buildNav() {
  for (const v of VIEWS) document.head.append(h("link", { rel: "stylesheet", href: `console/views/${v.id}.css` }));
  const nav = document.getElementById("nav");
  nav.replaceChildren(
    ...VIEWS.map((v) =>
      h("a", { href: `#/${v.id}`, dataset: { view: v.id } }, h("span.nav-icon", icon(v.icon)), h("span.nav-label", v.title)),
    ),
  );
}

async function start() {
  applyTheme(localStorage.getItem(THEME_KEY));
  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => applyTheme(localStorage.getItem(THEME_KEY)));
  document.getElementById("theme").addEventListener("click", toggleTheme);
  document.getElementById("signout").addEventListener("click", signOut);
  document.querySelector("a.skip").addEventListener("click", (ev) => {
    ev.preventDefault(); // the address stays the view's
    focusHeading(document.getElementById("view"));
  });
  buildNav();
  try {
    const res = await fetch("console/config.json", { cache: "no-store", credentials: "omit" });
    state.config = await res.json();
  } catch (err) {
    showStatus("closed", `Could not read the console's settings: ${err.message}`);
    notConnected();
    return;
  }
  const wsUrl = state.config.wsUrl || `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`;
  document.getElementById("version").textContent = `v${state.config.version}`;
  // a client id of this page's own: two tabs (or a duplicated one) never replace each other's socket
  state.gw = new Gateway({ wsUrl, httpBase: location.origin, clientId: `console-${randomId(6)}`, version: state.config.version });
  state.gw.on("status", ({ state: s, error }) => showStatus(s, error));
  state.gw.on("unauthorized", tokenRefused);
  state.gw.on("spend.alert", (a) => toast(spendAlertText(a), "error")); // stays until dismissed
  state.approvals = new Approvals(state.gw);
  state.approvals.on(showApprovals);
  window.addEventListener("keydown", (ev) => {
    // Alt+1…9 switch views
    if (ev.altKey && !ev.ctrlKey && !ev.metaKey && /^[1-9]$/.test(ev.key)) {
      const view = VIEWS[Number(ev.key) - 1];
      if (view) {
        ev.preventDefault();
        navigate(view.id);
      }
    }
  });
  document.getElementById("signout").hidden = !state.config.tokenRequired;
  if (await connect()) showViews();
  else notConnected();
}

/** Connected (or connecting again by itself): show the view the address names, and follow the address. */
function showViews() {
  document.getElementById("signout").hidden = !state.config.tokenRequired;
  if (state.routed) return;
  window.addEventListener("hashchange", route);
  route();
}

function notConnected() {
  if (state.routed) return; // the view stays; the status line says what is wrong
  const retry = h("button.primary", { type: "button", onclick: () => location.reload() }, "Try again");
  const why = document.getElementById("status").title;
  document.getElementById("view").replaceChildren(h("section.notice", h("h1", "Not connected"), h("p", why), retry));
}

start();

// Chat: talk to an agent in one session and watch the reply stream in. `#/chat` is the default agent's main session
// (agent:main:main), `#/chat/<sessionKey>` any other. Beside the conversation: the sessions (a toggle on a phone);
// above it: the session's model, thinking level and token use. Tool calls show as cards (arguments, result,
// duration), thinking folded away, slash commands complete as you type, a Stop button ends the run in progress, and
// messages sent while a run is going show as queued until their own run starts.
// A tool call that waits for the owner's approval shows as a card at the end of its session (the tool, its masked
// arguments, the rule and reason that asked, where a tainted run's content came from, the time left) with Approve,
// Approve for this session and Deny; a decision made elsewhere takes the card away and says who decided.
// Methods: sessions.list, session.preview, session.get, session.stats, spend.status (the strip in dollars), config.get (the default model), chat.send,
// approval.resolve (the pending approvals themselves: ../approvals.js).
// Events: chat (delta, tool, partial, paused, final, error) and status (reload after a reconnect). `paused` is not
// a message of the transcript (the gateway never stores the prompt): the run shows as waiting instead.
//
// GSV clients get no tool-result events: a card starts as "running" from the `tool` event, and the run's next event
// re-reads the transcript (session.preview), whose stored toolResult messages fill the cards.

import { spendItems } from "../spend.js";
import { decidedText, taintSources, timeLeft } from "../approvals.js";
import { busy as markBusy, clip, errorText, failed, fill, formatDuration, formatNumber, formatTime, h, icon, imageNode, markdown, randomId, rerender } from "../ui.js";

const MAIN_KEY = "agent:main:main";
const PAGE = 100; // messages per session.preview page
const RESULT_CLIP = 2000; // characters of a tool result shown before "Show all"
const STICK_PX = 48; // this close to the bottom counts as "at the bottom": new text keeps it there
const LIST_DELAY_MS = 400; // a burst of run ends reads the session list once

export default {
  id: "chat",
  title: "Chat",
  icon: "chat",
  mount(container, ctx) {
    const view = new ChatView(container, ctx);
    view.start(ctx.params);
    return { destroy: () => view.destroy(), update: (params) => view.open(keyOf(params)) };
  },
};

/** A run on its way: text streamed so far, the message sent before its tool calls, the calls, the final message. */
/** The gateway's trace of a run that ended without a reply (stopped or failed), stored after its user message. */
function isTrace(m) {
  return Boolean(m && m.role === "assistant" && m.api === "orbital" && (m.stopReason === "aborted" || m.stopReason === "error"));
}

function newRun() {
  return { text: "", partial: null, tools: [], unanswered: new Set(), final: null, ended: false, paused: null, el: null };
}

function keyOf(params) {
  const key = (params && params[0] ? String(params[0]) : "").trim();
  return key || MAIN_KEY;
}

// --- what a session key says about a session -------------------------------------------------------------------

const cap = (s) => (s ? s[0].toUpperCase() + s.slice(1) : s);

/**
 * A session's name, where it came from, and whether it is read-only here, from its key's shape
 * (orbital/domain/session_keys.py: `agent:{agent}:{main}`, `agent:{agent}:{channel}:dm:{peer}`,
 * `agent:{agent}:{channel}:{kind}:{peer}`, `agent:{agent}:cron:{job}:{run}`, `agent:{agent}:heartbeat:…`).
 *
 * Read-only: cron runs and heartbeats (each run is a finished task of the scheduler: a message there would start a
 * run nobody scheduled), and channel conversations. A message sent from here into a channel session would run the
 * agent, but its reply comes back to this console only, never to the person on the channel, while it still becomes
 * part of their conversation's history: confusing for both sides. Answer on the channel itself instead.
 */
export function describeSession(key) {
  const parts = String(key).split(":");
  if (parts[0] !== "agent" || parts.length < 3) return { title: key, source: "Client", kind: "client" };
  const [, agent, ...rest] = parts;
  const of = agent === "main" ? "" : ` (agent ${agent})`;
  const head = rest[0];
  if (rest.length === 1) {
    if (head === "main") return { title: `Main session${of}`, source: "Main", kind: "main" };
    if (head.startsWith("console-")) return { title: `Console ${head.slice(8)}${of}`, source: "Console", kind: "console" };
    return { title: `${head}${of}`, source: "Client", kind: "client" };
  }
  if (head === "cron") {
    return {
      title: `Cron run of job ${rest[1] || "?"}${of}`,
      source: "Schedule",
      kind: "cron",
      readOnly: "This is a scheduled job's run: it is shown as it happened, and cannot be answered here.",
    };
  }
  if (head === "heartbeat") {
    return { title: `Heartbeat${of}`, source: "Heartbeat", kind: "heartbeat", readOnly: "Heartbeat runs are the agent's own: they cannot be answered here." };
  }
  const dm = rest.indexOf("dm");
  const readOnly = (channel) =>
    `A ${channel ? cap(channel) : "channel"} conversation: a reply from here would not reach it. Answer on ${channel ? cap(channel) : "the channel"} instead.`;
  if (dm >= 0 && dm < rest.length - 1) {
    const channel = dm > 0 ? rest[0] : null;
    const peer = rest.slice(dm + 1).join(":");
    return { title: `${peer}${of}`, source: channel ? `${cap(channel)} · direct` : "Direct message", kind: "channel", readOnly: readOnly(channel) };
  }
  if (rest.length >= 3) {
    return { title: `${rest.slice(2).join(":")}${of}`, source: `${cap(rest[0])} · ${rest[1]}`, kind: "channel", readOnly: readOnly(rest[0]) };
  }
  return { title: `${rest.join(":")}${of}`, source: "Client", kind: "client" };
}

/** A fresh key for a session of this console. */
function newSessionKey() {
  return `agent:main:console-${randomId(4)}`;
}

// --- slash commands --------------------------------------------------------------------------------------------

/** The completion choices from the console's config (`/help` rows): "/new or /reset" is two choices; what gets
 * inserted is the command itself ("/compact "), a directive up to its placeholder ("/m:"). */
export function commandChoices(rows) {
  const out = [];
  for (const row of rows || []) {
    for (const alt of String(row.usage || "").split(/\s+or\s+/)) {
      const [token, ...args] = alt.trim().split(/\s+/);
      if (!token || !token.startsWith("/")) continue;
      const colon = token.indexOf(":");
      let insert = token;
      if (colon > 0 && /-/.test(token.slice(colon + 1))) insert = token.slice(0, colon + 1); // "/m:model-id" → "/m:"
      else if (args.length) insert = `${token} `;
      out.push({ insert, usage: alt.trim(), description: String(row.description || ""), group: String(row.group || "") });
    }
  }
  return out;
}

// --- reading stored messages -----------------------------------------------------------------------------------

function blocksOf(message) {
  const c = message && message.content;
  if (typeof c === "string") return [{ type: "text", text: c }];
  return Array.isArray(c) ? c.filter((b) => b && typeof b === "object") : [];
}

function textOf(message) {
  return blocksOf(message)
    .filter((b) => b.type === "text")
    .map((b) => b.text || "")
    .join("\n");
}

function pretty(value) {
  if (typeof value === "string") {
    const t = value.trim();
    if (/^[[{]/.test(t)) {
      try {
        return JSON.stringify(JSON.parse(t), null, 2);
      } catch {
        /* not JSON: as it is */
      }
    }
    return value;
  }
  try {
    return JSON.stringify(value ?? {}, null, 2);
  } catch {
    return String(value);
  }
}

const OUTPUT_FIELDS = ["output", "stdout", "content", "text"];

/** A result's text to show: a JSON object with an `output` (a command's), `content` (a file's) or `text` string
 * shows that string as it is, and its other fields (as JSON) under "Details"; anything else pretty-printed. */
function splitResult(text) {
  const t = String(text ?? "").trim();
  if (t.startsWith("{")) {
    try {
      const value = JSON.parse(t);
      const name = OUTPUT_FIELDS.find((k) => typeof value[k] === "string");
      if (name) {
        const rest = { ...value };
        delete rest[name];
        if (rest.tail === value[name]) delete rest.tail; // a command's tail repeats a short output
        return { main: value[name], label: cap(name), rest: Object.keys(rest).length ? JSON.stringify(rest, null, 2) : "" };
      }
    } catch {
      /* not JSON: as it is */
    }
  }
  return { main: pretty(String(text ?? "")), label: "Result", rest: "" };
}

/** A one-line hint of a call's arguments for its folded card (a command, a path, …). */
function argumentHint(args) {
  let value = args;
  if (typeof args === "string") {
    try {
      value = JSON.parse(args);
    } catch {
      return args.slice(0, 80);
    }
  }
  if (!value || typeof value !== "object") return "";
  const first = Object.values(value).find((v) => typeof v === "string" && v.trim());
  return first ? first.replace(/\s+/g, " ").slice(0, 80) : "";
}

function splitToolName(name) {
  const n = String(name || "tool");
  const at = n.indexOf("__");
  if (at < 0) return { tool: n, where: "" };
  const where = n.slice(0, at);
  return { tool: n.slice(at + 2), where: where === "gsv" ? "gateway" : where };
}

function modelLabel(model, fallback) {
  if (!model) return fallback ? modelLabel(fallback) : "";
  if (typeof model === "string") return model;
  const provider = model.provider || (fallback && fallback.provider) || "";
  return model.id ? (provider ? `${provider}/${model.id}` : String(model.id)) : "";
}

// --- the view --------------------------------------------------------------------------------------------------

/** One session's state: what is stored, what is on its way, and what only this tab said (notes). */
function sessionState(key) {
  return {
    key,
    info: describeSession(key),
    canonical: "",
    sessionId: null,
    label: null,
    messages: [],
    messageCount: 0,
    truncated: false,
    limit: PAGE,
    loaded: false,
    loadError: null,
    notes: [], // {kind: command|error|small, title, body, anchor (a message count), sessionId, after}
    pending: [], // user messages not stored yet: {text, runId, state: sending|queued|running, position}
    runs: new Map(), // runId → newRun()
    seen: new Set(), // runs that sent an event: their user message is stored
    ended: new Set(), // runs whose final or error came: anything of theirs that follows is ignored
    stats: null,
    meta: null,
    tick: 0,
    loading: false,
    again: false,
    next: null, // {promise, done}: ends once the read folded into `again` has ended
    loadingEarlier: false,
  };
}

class ChatView {
  constructor(container, ctx) {
    this.container = container;
    this.gw = ctx.gw;
    this.ctx = ctx;
    this.choices = commandChoices(ctx.config && ctx.config.commands);
    this.open_ = new Set(); // tool cards the user unfolded (kept across re-renders)
    this.full = new Set(); // tool results shown whole
    this.drafts = new Map(); // unsent text per session
    this.defaultModel = undefined;
    this.stick = true;
    this.sending = false;
    this.stopping = false;
    this.offs = [];
    this.timers = new Set(); // timeouts still to come: cleared when the view goes
    this.s = null;
    this.wasOpen = this.gw.state === "open"; // mounted while connecting: the first "open" reads everything again
    this.metaSeq = 0; // the latest session.get/stats read and sessions.list read: older answers are dropped
    this.listSeq = 0;
    this.listTimer = null;
    this.approvals = ctx.approvals || null; // the page's pending approvals (../approvals.js)
    this.answering = new Set(); // approvals this tab is answering: their buttons wait
    this.noted = new Set(); // approvals whose decision is already a note
    this.ticker = null; // while approval cards show: their time left, once a second
  }

  /** A timeout that destroy() cancels. */
  later(fn, ms) {
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      fn();
    }, ms);
    this.timers.add(timer);
    return timer;
  }

  /** Read the session list soon: one read for a burst of asks. */
  refreshListSoon() {
    if (this.listTimer) {
      clearTimeout(this.listTimer);
      this.timers.delete(this.listTimer);
    }
    this.listTimer = this.later(() => {
      this.listTimer = null;
      this.loadList();
    }, LIST_DELAY_MS);
  }

  start(params) {
    this.build();
    this.offs.push(this.gw.on("chat", (ev) => this.onChat(ev)));
    if (this.approvals) this.offs.push(this.approvals.on((change) => this.onApprovals(change)));
    this.offs.push(
      this.gw.on("status", ({ state }) => {
        if (state === "open" && !this.wasOpen) this.reconnected();
        this.wasOpen = state === "open";
        this.updateComposer();
      }),
    );
    this.open(keyOf(params));
    this.loadList();
  }

  destroy() {
    for (const off of this.offs) off();
    this.offs = [];
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    clearInterval(this.ticker);
    this.ticker = null;
    this.resized?.disconnect();
    this.s = null;
  }

  // --- building the page -------------------------------------------------------------------------------------

  build() {
    const listId = "chat-sessions";
    this.list = h("ul.session-list");
    this.listNote = h("p.hint.list-note");
    this.sessionsPanel = h(
      `aside#${listId}.sessions`,
      { "aria-label": "Sessions" },
      h(
        "div.sessions-head",
        h("h2", "Sessions"),
        h("button.icon.small", { type: "button", "aria-label": "Refresh the sessions", title: "Refresh the sessions", onclick: () => this.loadList() }, icon("refresh")),
        h("button.icon.small.sessions-close", { type: "button", "aria-label": "Close the sessions", title: "Close the sessions", onclick: () => (this.showSessions(false), this.toggle.focus()) }, icon("close")),
      ),
      this.list,
      this.listNote,
    );
    this.toggle = h(
      "button.sessions-toggle.small",
      { type: "button", "aria-expanded": "false", "aria-controls": listId, onclick: () => this.showSessions(this.toggle.getAttribute("aria-expanded") !== "true") },
      "Sessions",
    );
    this.title = h("h1#chat-title");
    this.source = h("span.badge");
    this.keyText = h("code.chat-key");
    const newButton = h("button.small", { type: "button", onclick: () => this.newSession() }, icon("plus"), " New session");
    const head = h("header.chat-head", this.toggle, h("div.chat-titles", this.title, h("div.chat-sub", this.source, " ", this.keyText)), newButton);

    this.metaStrip = h("div.meta-strip", { "aria-label": "Session settings and token use" });

    this.earlier = h("div.earlier");
    this.stored = h("div.stored");
    this.tail = h("div.tail");
    this.transcript = h(
      "div.transcript",
      { role: "region", "aria-label": "Conversation", tabindex: "0" },
      this.earlier,
      this.stored,
      this.tail,
    );
    this.transcript.addEventListener("scroll", () => {
      this.stick = this.transcript.scrollHeight - this.transcript.scrollTop - this.transcript.clientHeight < STICK_PX;
      if (this.stick) this.jump.hidden = true;
    });
    // the transcript's own height changes (the settings strip arrives, the composer grows): keep the newest in view
    this.resized = new ResizeObserver(() => this.stick && this.toBottom());
    this.resized.observe(this.transcript);
    this.jump = h("button.jump.small", { type: "button", hidden: true, onclick: () => this.toBottom() }, h("span", { "aria-hidden": "true" }, "↓ "), "Jump to the latest");
    this.announce = h("div.sr-only", { role: "status", "aria-live": "polite" });

    this.runText = h("span.run-text");
    this.stopButton = h("button.danger.small.stop", { type: "button", onclick: () => this.stop() }, icon("stop"), " Stop");
    this.runbar = h("div.runbar", { hidden: true }, h("span.spinner", { "aria-hidden": "true" }), this.runText, this.stopButton);

    this.buildComposer();
    this.readonly = h("p.readonly-note", { hidden: true });

    const conversation = h(
      "section.conversation",
      { "aria-labelledby": "chat-title" },
      head,
      this.metaStrip,
      h("div.transcript-wrap", this.transcript, this.jump),
      this.runbar,
      this.composer,
      this.readonly,
      this.announce,
    );
    this.root = h("div.chat", this.sessionsPanel, conversation);
    this.root.addEventListener("keydown", (ev) => {
      if (ev.key === "Escape" && this.root.classList.contains("sessions-open")) {
        this.showSessions(false);
        this.toggle.focus();
      }
    });
    this.container.append(this.root);
  }

  buildComposer() {
    // typing "/" pops up the commands (a listbox), the arrows move through them (aria-activedescendant); a
    // textarea may not take the combobox role, so how many there are is said in the live region instead
    this.input = h("textarea#chat-input", {
      rows: "2",
      autofocus: true,
      placeholder: "Message the agent… (/ for commands)",
      "aria-autocomplete": "list",
      "aria-controls": "chat-commands",
      "aria-describedby": "chat-input-hint",
      spellcheck: "true",
    });
    this.listbox = h("ul#chat-commands.completions", { role: "listbox", "aria-label": "Commands", hidden: true });
    this.sendButton = h("button.primary.send", { type: "submit" }, icon("send"), " Send");
    this.composer = h(
      "form.composer",
      { "aria-label": "Send a message" },
      h("div.composer-label", h("label", { for: "chat-input" }, "Message"), h("span#chat-input-hint.hint", "Enter sends · Shift+Enter for a new line · / for commands")),
      h("div.composer-row", h("div.input-wrap", this.listbox, this.input), this.sendButton),
    );
    this.composer.addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.submit();
    });
    this.input.addEventListener("keydown", (ev) => this.onKey(ev));
    this.input.addEventListener("input", () => {
      this.dismissed = null;
      this.complete();
      this.updateComposer();
      this.autosize();
    });
    this.input.addEventListener("blur", () => this.later(() => document.activeElement !== this.input && this.closeCompletion(), 150));
  }

  autosize() {
    this.input.style.height = "auto";
    this.input.style.height = `${Math.min(this.input.scrollHeight + 2, 220)}px`;
  }

  showSessions(show) {
    this.root.classList.toggle("sessions-open", show);
    this.toggle.setAttribute("aria-expanded", show ? "true" : "false");
    if (show) (this.list.querySelector("[aria-current]") || this.list.querySelector("a"))?.focus();
  }

  // --- switching sessions --------------------------------------------------------------------------------------

  open(key) {
    if (this.s && this.s.key === key) return;
    if (this.s) this.drafts.set(this.s.key, this.input.value);
    this.s = sessionState(key);
    this.input.value = this.drafts.get(key) || "";
    this.closeCompletion();
    this.autosize();
    this.stick = true;
    this.jump.hidden = true;
    this.showSessions(false);
    this.showHeader();
    this.renderAll();
    this.updateComposer();
    if (this.sessions || this.listError) this.renderList(); // it lists the new current one, even without messages
    this.reload();
    this.refreshMeta();
  }

  newSession() {
    this.ctx.navigate("chat", newSessionKey());
    this.input.focus();
  }

  reconnected() {
    const s = this.s;
    if (!s) return;
    s.runs.clear(); // whatever ran meanwhile is in the transcript now, or still going (session.stats says)
    this.reload();
    this.refreshMeta();
    this.loadList();
  }

  showHeader() {
    const s = this.s;
    this.title.textContent = s.label || s.info.title;
    this.source.textContent = s.info.source;
    this.keyText.textContent = s.key;
    this.keyText.title = s.key;
  }

  // --- loading -------------------------------------------------------------------------------------------------

  /** Re-read the transcript; calls that overlap are folded into one more read after the current one. The promise
   * ends once a read that started after the call has ended (or the session is no longer shown). */
  reload() {
    const s = this.s;
    if (!s) return Promise.resolve();
    if (s.loading) {
      s.again = true;
      if (!s.next) {
        let done;
        s.next = { promise: new Promise((resolve) => (done = resolve)), done };
      }
      return s.next.promise;
    }
    return this.read(s);
  }

  async read(s) {
    s.loading = true;
    const startTick = ++s.tick;
    const seenBefore = new Set(s.seen);
    const endedBefore = [...s.runs].filter(([, r]) => r.ended).map(([id]) => id);
    try {
      const res = await this.gw.call("session.preview", { sessionKey: s.key, limit: s.limit });
      if (s !== this.s) return;
      s.loadError = null;
      s.loaded = true;
      s.canonical = res.sessionKey || s.canonical;
      s.sessionId = res.sessionId;
      s.messages = Array.isArray(res.messages) ? res.messages : [];
      s.messageCount = res.messageCount ?? s.messages.length;
      s.truncated = Boolean(res.truncated);
      this.settle(s, seenBefore, endedBefore, startTick);
    } catch (err) {
      if (s !== this.s) return;
      s.loadError = err;
    } finally {
      s.loading = false;
      const next = s.next; // callers waiting for a read that started after their call: the one that starts now
      s.next = null;
      const again = s === this.s && s.again;
      s.again = false;
      if (s === this.s) this.renderAll();
      if (again) this.read(s).then(next?.done);
      else next?.done();
    }
  }

  /** After a read: what it now holds leaves the live part (user messages of runs that had started, runs that had
   * ended, tool calls stored with their results), and notes without a place get one. */
  settle(s, seenBefore, endedBefore, startTick) {
    s.pending = s.pending.filter((p) => !(p.runId && seenBefore.has(p.runId)));
    for (const id of endedBefore) s.runs.delete(id);
    const stored = new Set();
    const answered = new Set();
    for (const m of s.messages) {
      if (m.role === "toolResult") answered.add(m.toolCallId);
      for (const b of blocksOf(m)) if (b.type === "toolCall" && b.id) stored.add(b.id);
    }
    for (const run of s.runs.values()) {
      for (const id of [...run.unanswered]) if (answered.has(id)) run.unanswered.delete(id);
      const ids = [...run.tools.map((t) => t.id), ...blocksOf(run.partial).filter((b) => b.type === "toolCall").map((b) => b.id)];
      if (ids.length && ids.every((id) => stored.has(id))) {
        run.partial = null;
        run.tools = [];
      }
    }
    for (const note of s.notes) {
      if (note.anchor === null && note.after < startTick) {
        note.anchor = s.messageCount;
        note.sessionId = s.sessionId;
      }
    }
  }

  async refreshMeta() {
    const s = this.s;
    if (!s) return;
    const mine = ++this.metaSeq; // an older read answering last must not undo a newer one (a run bar left up)
    const stale = () => s !== this.s || mine !== this.metaSeq;
    try {
      if (this.defaultModel === undefined) {
        this.defaultModel = await this.gw.call("config.get", { path: "model" }).then((r) => r.value ?? null, () => null);
      }
      const asked = performance.now();
      const [meta, stats, spend] = await Promise.all([
        this.gw.call("session.get", { sessionKey: s.key }),
        this.gw.call("session.stats", { sessionKey: s.key }),
        this.gw.call("spend.status", { sessionKey: s.key }).catch(() => null), // an older gateway: tokens only
      ]);
      if (stale()) return;
      s.meta = meta;
      s.stats = stats;
      s.spend = spend;
      this.dequeued(s, stats, asked);
      s.label = meta.label || null;
      this.showHeader();
      this.renderMeta();
      this.updateRunbar();
    } catch (err) {
      if (stale()) return;
      fill(this.metaStrip, h("span.error", `Could not read the session's settings: ${errorText(err)}`));
    }
  }

  async loadList() {
    const mine = ++this.listSeq;
    try {
      const res = await this.gw.call("sessions.list", { limit: 100 });
      if (mine !== this.listSeq) return;
      this.sessions = Array.isArray(res.sessions) ? res.sessions : [];
      this.listCount = res.count ?? this.sessions.length;
      this.listError = null;
    } catch (err) {
      if (mine !== this.listSeq) return;
      this.listError = err;
    }
    if (this.s) this.renderList();
  }

  // --- the session list ----------------------------------------------------------------------------------------

  renderList() {
    const s = this.s;
    const entries = [...(this.sessions || [])];
    const current = (key) => key === s.key || (s.canonical && key === s.canonical);
    if (!entries.some((e) => current(e.sessionKey))) entries.unshift({ sessionKey: s.key, fresh: true });
    if (!entries.some((e) => e.sessionKey === MAIN_KEY)) entries.push({ sessionKey: MAIN_KEY, fresh: true });
    rerender(
      this.list,
      entries.map((e) => {
        const info = describeSession(e.sessionKey);
        const when = !e.fresh ? formatTime(e.lastActiveAt) : info.kind === "console" ? "no messages yet" : "";
        return h(
          "li",
          h(
            "a",
            {
              href: `#/chat/${encodeURIComponent(e.sessionKey)}`,
              dataset: { key: e.sessionKey },
              title: e.sessionKey,
              onclick: () => this.showSessions(false),
            },
            h("span.session-name", String(e.label || info.title)),
            h("span.session-meta", h("span.session-source", info.source), when ? ` · ${when}` : null),
          ),
        );
      }),
    );
    if (this.listError) {
      const retry = h("button.small", { type: "button", dataset: { key: "retry-list" }, onclick: () => this.loadList() }, "Try again");
      rerender(this.listNote, [h("span.error", `Could not list the sessions: ${errorText(this.listError)}`), " ", retry]);
    } else {
      fill(this.listNote, this.listCount > (this.sessions || []).length ? `Showing the ${this.sessions.length} most recent of ${formatNumber(this.listCount)}.` : "");
    }
    this.markCurrent();
  }

  markCurrent() {
    const s = this.s;
    for (const a of this.list.querySelectorAll("a[data-key]")) {
      const on = a.dataset.key === s.key || (s.canonical && a.dataset.key === s.canonical);
      if (on) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
  }

  // --- the header strip: model, thinking, tokens ---------------------------------------------------------------

  renderMeta() {
    const { meta, stats } = this.s;
    const settings = (meta && meta.settings) || {};
    const model = modelLabel(settings.model, this.defaultModel) || modelLabel(this.defaultModel) || "the gateway's default";
    const thinking = settings.thinkingLevel && settings.thinkingLevel !== "none" ? String(settings.thinkingLevel) : "off";
    const tokens = (stats && stats.tokens) || (meta && meta.tokens) || { input: 0, output: 0, total: 0 };
    const budget = (stats && stats.budget) || {};
    const items = [
      metaItem("Model", h("code", model), "Change it with /model provider/model-id"),
      metaItem("Thinking", thinking, "Change it with /think level"),
      metaItem("Tokens", tokenUse(tokens, budget.session), `${formatNumber(tokens.input)} in, ${formatNumber(tokens.output)} out`),
    ];
    for (const [name, label] of [["daily", "Today"], ["monthly", "This month"]]) {
      const b = budget[name];
      if (b && b.limit) items.push(metaItem(label, tokenUse(null, b), `All sessions of the gateway, ${b.period || ""}`));
    }
    for (const [label, value, title] of spendItems(this.s.spend)) items.push(metaItem(label, value, title));
    fill(this.metaStrip, items);
  }

  // --- rendering the transcript --------------------------------------------------------------------------------

  /** Draw the transcript again; the keyboard stays on the control it was on (tool cards, buttons: by data-key). */
  renderAll() {
    this.keepBottom(() => {
      this.renderEarlier();
      fill(this.stored, this.storedNodes());
      this.renderTail();
    });
    this.updateRunbar();
  }

  renderEarlier() {
    const s = this.s;
    const hidden = s.messageCount - s.messages.length;
    if (s.truncated) {
      rerender(this.earlier, h("p.hint", "Older messages are too large to show here."));
    } else if (hidden > 0) {
      const label = `Show earlier messages (${formatNumber(hidden)} more)`;
      const more = h("button.small", { type: "button", dataset: { key: "earlier" }, disabled: s.loadingEarlier }, s.loadingEarlier ? "Loading…" : label);
      more.addEventListener("click", () => this.loadEarlier(more));
      rerender(this.earlier, more);
    } else {
      rerender(this.earlier, []);
    }
  }

  /** One more page of older messages; the message at the top stays where it is once they are in. */
  async loadEarlier(button) {
    const s = this.s;
    if (s.loadingEarlier) return;
    s.loadingEarlier = true;
    const focused = document.activeElement === button;
    const done = markBusy(button, "Loading…");
    s.limit += PAGE;
    const before = this.transcript.scrollHeight - this.transcript.scrollTop;
    await this.reload(); // the read that asks for the larger page, even if another one was running
    s.loadingEarlier = false;
    if (s !== this.s) return;
    this.renderEarlier();
    this.transcript.scrollTop = this.transcript.scrollHeight - before; // the same message stays in view
    done();
    // no earlier messages left, so no button: the keyboard goes on in the conversation
    if (focused && (!document.activeElement || document.activeElement === document.body)) this.transcript.focus({ preventScroll: true });
  }

  storedNodes() {
    const s = this.s;
    if (s.loadError && !s.loaded) {
      const retry = h("button.small", { type: "button", dataset: { key: "retry-load" }, onclick: () => this.reload() }, "Try again");
      return h("div.load-error", { role: "alert" }, h("p.error", `Could not read this session: ${errorText(s.loadError)}`), retry);
    }
    if (!s.loaded) return h("p.hint.loading", "Loading the conversation…");
    const results = new Map();
    for (const m of s.messages) if (m.role === "toolResult" && m.toolCallId) results.set(m.toolCallId, m);
    const calls = new Set();
    for (const m of s.messages) for (const b of blocksOf(m)) if (b.type === "toolCall") calls.add(b.id);
    const base = s.messageCount - s.messages.length;
    const traced = new Set(s.messages.filter(isTrace).map((m) => m.runId)); // stored: the live note of the run goes
    s.notes = s.notes.filter((n) => !(n.runId && traced.has(n.runId)));
    const notes = s.notes.filter((n) => n.anchor !== null && n.sessionId === s.sessionId).sort((a, b) => a.anchor - b.anchor);
    const out = [];
    let n = 0;
    s.messages.forEach((m, i) => {
      while (n < notes.length && notes[n].anchor <= base + i) out.push(this.noteNode(notes[n++]));
      if (m.role === "toolResult" && calls.has(m.toolCallId)) return; // shown in its call's card
      out.push(this.messageNode(m, results));
    });
    while (n < notes.length) out.push(this.noteNode(notes[n++]));
    for (const note of s.notes.filter((x) => x.anchor === null)) out.push(this.noteNode(note));
    if (!out.length && !s.pending.length && !s.runs.size && !this.waitingApprovals().length) {
      out.push(h("div.chat-empty", h("p", "No messages yet."), h("p.hint", s.info.readOnly ? "Nothing was said in this session." : "Say hello, or type / to see the commands.")));
    }
    return out;
  }

  messageNode(m, results) {
    if (m.role === "user") return userNode(m.content, m.timestamp, this.gw);
    if (isTrace(m)) return this.noteNode({ kind: "error", title: "The run ended", body: String(m.errorMessage || textOf(m) || "The run failed.") });
    if (m.role === "assistant") return this.assistantNode(m, results);
    if (m.role === "toolResult") {
      return h("div.msg.assistant", this.toolCard({ id: m.toolCallId, name: m.toolName, args: undefined, result: m, started: null }));
    }
    return h("div.note.small", h("span.note-title", String(m.role || "message")), h("div", textOf(m)));
  }

  assistantNode(m, results) {
    const body = this.blockNodes(blocksOf(m), m.timestamp, results, false);
    if (m.stopReason === "error" || m.errorMessage) body.push(h("p.error", String(m.errorMessage || "The model call failed.")));
    else if (m.stopReason === "length") body.push(h("p.hint", "The reply was cut off: it reached the model's output limit."));
    return h("div.msg.assistant", messageHead("Assistant", m.timestamp, modelLabel(m.provider && m.model ? { provider: m.provider, id: m.model } : m.model)), body);
  }

  /** The blocks of an assistant message: thinking folded, text as markdown, tool calls as cards, images. */
  blockNodes(blocks, startedAt, results, live) {
    const out = [];
    for (const b of blocks) {
      if (b.type === "text" && b.text && b.text.trim()) out.push(markdown(b.text));
      else if (b.type === "thinking" || b.type === "redacted_thinking") out.push(thinkingNode(b));
      else if (b.type === "toolCall") {
        out.push(this.toolCard({ id: b.id, name: b.name, args: b.arguments, result: results && results.get(b.id), started: startedAt, live }));
      } else if (b.type === "image") out.push(imageNode(b, null, this.gw));
    }
    return out;
  }

  noteNode(note) {
    const kind = note.kind === "error" ? "error" : note.kind === "small" ? "small" : "command";
    return h(
      `div.note.${kind}`, // announced once when it happens (say()), not on every re-render
      note.title ? h("span.note-title", note.title) : null,
      note.markdown ? markdown(note.body) : h("div", String(note.body ?? "")),
    );
  }

  // --- tool cards ----------------------------------------------------------------------------------------------

  /** @param {{id: any, name: any, args: any, result: any, started: any, live?: any}} card */
  toolCard({ id, name, args, result, started, live }) {
    const { tool, where } = splitToolName(name);
    const busy = !result && (live || this.busy());
    const asking = !result && Boolean(id) && this.waitingApprovals().some((a) => a.callId === id);
    const status = result ? (result.isError ? "error" : "done") : asking ? "awaiting approval" : busy ? "running" : "no result";
    const duration = result && started && result.timestamp ? formatDuration(result.timestamp - started) : null;
    const hint = args !== undefined ? argumentHint(args) : "";
    const card = h(`details.tool.${status.replaceAll(" ", "-")}`, { dataset: { id: id || "" } });
    card.open = Boolean(id && this.open_.has(id));
    card.addEventListener("toggle", () => {
      if (!id) return;
      if (card.open) this.open_.add(id);
      else this.open_.delete(id);
    });
    const badge = { done: "ok", error: "error", running: "warn", "awaiting approval": "warn" }[status];
    card.append(
      h(
        "summary",
        id ? { dataset: { key: `tool:${id}` } } : {},
        h("span.tool-name", tool),
        where ? h("span.tool-where", `on ${where}`) : null,
        hint ? h("code.tool-hint", hint) : null,
        h(`span.badge${badge ? `.${badge}` : ""}.tool-status`, status === "done" ? "done" : status),
        duration ? h("span.tool-duration", { title: "From the model's call to the stored result" }, duration) : null,
      ),
    );
    const body = h("div.tool-body", h("div.tool-full-name", "Tool ", h("code", String(name || "?")), id ? h("span.hint", ` · call ${id}`) : null));
    if (args !== undefined) body.append(h("h4", "Arguments"), h("pre.tool-args", pretty(args)));
    if (result) body.append(this.resultNode(id, result));
    else body.append(h("p.hint", asking ? "Not run yet: it waits for your approval." : busy ? "Running…" : "No result was stored for this call."));
    card.append(body);
    return card;
  }

  resultNode(id, result) {
    const { main, label, rest } = splitResult(textOf(result));
    const wrap = h("div.tool-result", h("h4", result.isError ? "Error" : label));
    const whole = this.full.has(id);
    const [shown, cut] = whole ? [main, false] : clip(main, RESULT_CLIP);
    wrap.append(h(`pre.tool-output${result.isError ? ".error" : ""}`, shown || "(empty)"));
    if (cut) wrap.append(h("p.hint", `Cut at ${formatNumber(RESULT_CLIP)} of ${formatNumber(main.length)} characters.`));
    if (main.length > RESULT_CLIP) {
      const more = h("button.small.show-all", { type: "button", "aria-expanded": whole ? "true" : "false", dataset: { key: `all:${id}` } }, whole ? "Show less" : "Show all");
      more.addEventListener("click", () => {
        if (this.full.has(id)) this.full.delete(id);
        else this.full.add(id);
        const again = this.resultNode(id, result);
        wrap.replaceWith(again);
        again.querySelector(".show-all")?.focus();
      });
      wrap.append(more);
    }
    if (rest) wrap.append(h("details.tool-details", h("summary", { dataset: { key: `details:${id}` } }, "Details"), h("pre", rest)));
    for (const b of blocksOf(result)) if (b.type === "image") wrap.append(imageNode(b, null, this.gw));
    return wrap;
  }

  // --- the live part: messages on their way, runs streaming ----------------------------------------------------

  renderTail() {
    const s = this.s;
    const nodes = [];
    const shown = new Set();
    for (const p of s.pending.filter((x) => x.state !== "queued")) {
      nodes.push(pendingNode(p));
      const run = p.runId && s.runs.get(p.runId);
      if (run) {
        nodes.push(this.runElement(run));
        shown.add(p.runId);
      }
    }
    for (const [id, run] of s.runs) if (!shown.has(id)) nodes.push(this.runElement(run));
    const waiting = this.waitingApprovals();
    for (const a of waiting) nodes.push(this.approvalCard(a));
    for (const p of s.pending.filter((x) => x.state === "queued")) nodes.push(pendingNode(p));
    fill(this.tail, nodes);
    if (waiting.length && !this.ticker) this.ticker = setInterval(() => this.tickApprovals(), 1000);
    else if (!waiting.length && this.ticker) {
      clearInterval(this.ticker);
      this.ticker = null;
    }
  }

  // --- approvals -----------------------------------------------------------------------------------------------

  /** This session's tool calls waiting for an answer, oldest first. */
  waitingApprovals() {
    return this.approvals && this.s ? this.approvals.list((key) => this.mine(key)) : [];
  }

  approvalCard(a) {
    const id = a.approvalId;
    const { tool, where } = splitToolName(a.tool);
    const sources = taintSources(a.taint);
    const busy = this.answering.has(id);
    const button = (spec, key, label, decision, session) =>
      h(spec, { type: "button", disabled: busy, dataset: { key: `${key}:${id}` }, onclick: () => this.answerApproval(a, decision, session) }, label);
    const rule = [];
    if (a.ruleId) rule.push("Rule ", h("code", String(a.ruleId)));
    if (a.reason) rule.push(rule.length ? ": " : "", String(a.reason));
    return h(
      "section.approval",
      { "aria-label": `Approval needed: ${a.tool}`, dataset: { id } },
      h(
        "div.approval-head",
        h("strong", "Approval needed"),
        sources.length ? h("span.badge.error", "Tainted run") : null,
        h("span.approval-expiry", { dataset: { expires: String(a.expiresAt ?? "") }, title: a.expiresAt ? `Denied by itself at ${formatTime(a.expiresAt)}` : "" }, timeLeft(a.expiresAt)),
      ),
      h("p.approval-tool", "The agent wants to run ", h("code", tool), where ? ` on ${where}` : null, "."),
      h("h4", "Arguments"),
      h("pre.approval-args", pretty(a.args ?? {})),
      rule.length ? h("p.approval-rule", rule) : null,
      sources.length
        ? h("div.approval-taint", h("p", "This run holds content that did not come from you:"), h("ul", sources.map((line) => h("li", line))))
        : null,
      h(
        "div.approval-actions",
        button("button.primary", "approve", "Approve", "approve", false),
        button("button", "session", "Approve for this session", "approve", true),
        button("button.danger", "deny", "Deny", "deny", false),
      ),
    );
  }

  async answerApproval(a, decision, session) {
    const id = a.approvalId;
    if (this.answering.has(id)) return;
    this.answering.add(id);
    this.keepBottom(() => this.renderTail());
    try {
      const res = await this.approvals.resolve(id, decision, { session });
      if (res && res.resolved === false && this.s && this.mine(a.sessionKey) && !this.noted.has(id)) {
        this.noted.add(id);
        this.s.notes.push({ kind: "small", title: "Approval", body: String(res.message || "It had already been decided."), anchor: null, after: this.s.tick });
      }
    } catch (err) {
      failed("Answering the approval", err);
    } finally {
      this.answering.delete(id);
      if (this.s) this.renderAll();
    }
  }

  /** The page's pending approvals changed: cards come and go; a decision on one of this session's is said. */
  onApprovals(change) {
    const s = this.s;
    if (!s) return;
    if (change.type === "resolved" && !change.local) {
      const r = change.resolution;
      const key = r.sessionKey || (change.approval && change.approval.sessionKey);
      if (this.mine(key) && !this.noted.has(r.approvalId)) {
        this.noted.add(r.approvalId);
        const when = r.decidedAt ? ` · ${formatTime(r.decidedAt)}` : "";
        const text = decidedText(r, change.approval && change.approval.tool, this.gw.clientId);
        s.notes.push({ kind: "small", title: "Approval", body: `${text}${when}`, anchor: null, after: s.tick });
        this.say(text);
      }
      this.renderAll();
      return;
    }
    if (change.type === "requested" && this.mine(change.approval.sessionKey)) this.say(`Approval needed: ${change.approval.tool}`);
    this.renderAll(); // the card, and the empty session's note that gives way to it
  }

  tickApprovals() {
    for (const el of this.tail.querySelectorAll(".approval-expiry[data-expires]")) {
      const at = Number(el.dataset.expires);
      if (el.dataset.expires && Number.isFinite(at)) el.textContent = timeLeft(at);
    }
  }

  runElement(run) {
    if (!run.el) {
      run.textEl = h("div.live-text");
      run.partsEl = h("div.live-parts");
      run.stateEl = h("span.msg-extra");
      run.el = h("div.msg.assistant.live", h("div.msg-head", h("span.who", "Assistant"), run.stateEl), run.partsEl, run.textEl);
    }
    this.paintParts(run);
    this.paintText(run);
    return run.el;
  }

  paintParts(run) {
    if (!run.el) return;
    const parts = [];
    if (run.final) {
      parts.push(...this.blockNodes(blocksOf(run.final), run.final.timestamp, null, false));
    } else {
      if (run.partial) parts.push(...this.blockNodes(blocksOf(run.partial), run.partial.timestamp, null, true));
      const inPartial = new Set(blocksOf(run.partial).map((b) => b.id));
      for (const t of run.tools) {
        if (!inPartial.has(t.id)) parts.push(this.toolCard({ id: t.id, name: t.name, args: t.arguments, result: null, started: null, live: true }));
      }
    }
    fill(run.partsEl, parts);
    run.el.setAttribute("aria-busy", run.ended ? "false" : "true");
    run.stateEl.textContent = run.ended ? "" : run.paused ? "waiting for approval" : "writing…";
  }

  paintText(run) {
    if (!run.el) return;
    if (run.final) fill(run.textEl);
    else if (run.paused) fill(run.textEl, run.text ? markdown(run.text) : null, run.paused.text ? h("p.hint.paused-text", run.paused.text) : null);
    else if (run.text) fill(run.textEl, markdown(run.text));
    else if (!run.partial && !run.tools.length && !run.ended) fill(run.textEl, h("p.typing", h("span.dots", { "aria-hidden": "true" }), " Thinking…"));
    else fill(run.textEl);
  }

  // --- events --------------------------------------------------------------------------------------------------

  mine(key) {
    const s = this.s;
    return Boolean(s && key && (key === s.key || (s.canonical && key === s.canonical)));
  }

  onChat(ev) {
    if (!ev || typeof ev !== "object") return;
    if (ev.state === "final" || ev.state === "error") this.refreshListSoon();
    if (!this.mine(ev.sessionKey) || !ev.runId) return;
    const s = this.s;
    const id = ev.runId;
    if (s.ended.has(id)) return; // a run is over at its final or error (a stopped run's late pieces change nothing)
    if (ev.state === "final" || ev.state === "error") s.ended.add(id);
    const first = !s.seen.has(id);
    s.seen.add(id);
    if (first) this.runStarted(id);
    let run = s.runs.get(id);
    if (!run) {
      run = newRun();
      s.runs.set(id, run);
    }
    const waitingForResults = run.unanswered.size > 0; // calls whose results the transcript did not show yet
    let structural = !run.el;
    if (run.paused && ev.state !== "paused") {
      run.paused = null; // answered: the run goes on
      structural = true;
    }
    if (ev.state === "paused") {
      // not a message of the transcript: the run waits, and the approval's card (when the gateway sent it) asks
      const approval = ev.approval && typeof ev.approval === "object" ? ev.approval : null;
      run.paused = { text: approval ? "" : textOf(ev.message) || "The run waits for a tool approval: reply yes or no." };
      if (approval && this.approvals) this.approvals.add(approval);
      this.say(approval ? `Approval needed: ${approval.tool}` : "The run waits for a tool approval.");
      structural = true;
    } else if (ev.state === "delta") {
      run.text += ev.text || "";
    } else if (ev.state === "partial") {
      run.partial = ev.message || null;
      run.text = "";
      for (const b of blocksOf(run.partial)) if (b.type === "toolCall" && b.id) run.unanswered.add(b.id);
      structural = true;
    } else if (ev.state === "tool") {
      run.tools = Array.isArray(ev.tools) ? ev.tools : [];
      for (const t of run.tools) if (t && t.id) run.unanswered.add(t.id);
      structural = true;
    } else if (ev.state === "final") {
      run.final = ev.message || { content: [{ type: "text", text: run.text }] };
      run.ended = true;
      structural = true;
      this.say("The agent replied.");
    } else if (ev.state === "error") {
      s.runs.delete(id); // what it streamed was not stored: the error says why
      s.notes.push({ kind: "error", title: "The run ended", body: ev.error || "The run failed.", anchor: null, after: s.tick, runId: id });
      structural = true;
      this.say(`The run ended: ${ev.error || "it failed"}`);
    } else {
      return;
    }
    const ended = ev.state === "final" || ev.state === "error";
    const hasPending = s.pending.some((p) => p.runId === id);
    if (ended || (waitingForResults && ev.state !== "tool") || (first && !hasPending)) this.reload();
    if (ended) this.refreshMeta();
    if (ev.state === "error") {
      this.renderAll();
      return;
    }
    this.keepBottom(() => {
      if (structural) {
        this.paintParts(run);
        this.renderTail();
      } else {
        this.paintText(run);
      }
    });
    this.updateRunbar();
  }

  /** Queued messages the gateway no longer holds in its queue (asked after they were queued) have started, even if
   * this tab missed their events (a reconnect): their user message is stored now. */
  dequeued(s, stats, asked) {
    const waiting = new Set((stats.queue || []).map((q) => q.runId));
    const started = s.pending.filter((p) => p.state === "queued" && p.since < asked && !waiting.has(p.runId));
    for (const p of started) {
      s.seen.add(p.runId);
      this.runStarted(p.runId);
    }
    if (started.length) this.reload();
  }

  /** A queued message's run started: it is no longer queued, and those behind it move up. */
  runStarted(runId) {
    const s = this.s;
    const p = s.pending.find((x) => x.runId === runId);
    if (!p) return;
    if (p.state === "queued") {
      for (const q of s.pending) if (q.state === "queued" && q !== p && q.position > 1) q.position -= 1;
    }
    p.state = "running";
  }

  say(text) {
    this.announce.textContent = text;
  }

  // --- sending -------------------------------------------------------------------------------------------------

  submit() {
    const text = this.input.value;
    if (!text.trim() || this.sending || this.s.info.readOnly) return;
    this.input.value = "";
    this.drafts.delete(this.s.key);
    this.autosize();
    this.closeCompletion();
    this.send(text);
  }

  async send(text) {
    const s = this.s;
    const item = { text, runId: null, state: "sending", position: 0 };
    s.pending.push(item);
    this.sending = true;
    this.updateComposer();
    this.renderTail();
    this.toBottom();
    try {
      const res = await this.gw.call("chat.send", { sessionKey: s.key, message: text });
      if (s !== this.s) return;
      if (res.status === "paused") {
        // the session waits for an approval: the gateway took the message as the answer (yes / no) or dropped it
        // with a reminder; either way it is not a message of the transcript
        s.pending = s.pending.filter((p) => p !== item);
        s.notes.push({ kind: "small", title: text.trim(), body: String(res.response || "The run waits for a tool approval."), anchor: null, after: s.tick });
        this.refreshMeta();
      } else if (res.status === "command" || res.status === "directive-only") {
        s.pending = s.pending.filter((p) => p !== item);
        this.commandNote(s, text, res);
        this.reload();
        this.refreshMeta();
      } else {
        item.runId = res.runId || null;
        item.state = res.queued ? "queued" : "running";
        item.position = res.queuePosition || 1;
        item.since = performance.now();
        if (item.runId && s.seen.has(item.runId)) item.state = "running";
        if (item.runId && !res.queued && !s.runs.has(item.runId) && !s.ended.has(item.runId)) {
          s.runs.set(item.runId, newRun());
        }
        this.refreshListSoon();
      }
    } catch (err) {
      if (s !== this.s) return;
      s.pending = s.pending.filter((p) => p !== item);
      if (!this.input.value) {
        this.input.value = text;
        this.autosize();
      }
      failed("Sending the message", err);
    } finally {
      this.sending = false;
      if (s === this.s) {
        this.renderAll();
        this.updateComposer();
      }
    }
  }

  commandNote(s, text, res) {
    const command = text.trim().split(/\s+/)[0];
    if (res.status === "directive-only") {
      s.notes.push({ kind: "small", title: command, body: res.response || "Noted for the next message.", markdown: true, anchor: null, after: s.tick });
    } else if (res.error) {
      s.notes.push({ kind: "error", title: text.trim(), body: res.error, markdown: true, anchor: null, after: s.tick });
    } else {
      s.notes.push({ kind: "command", title: text.trim(), body: res.response || "Done.", markdown: true, anchor: null, after: s.tick });
    }
  }

  async stop() {
    const s = this.s;
    if (this.stopping) return;
    this.stopping = true;
    this.stopButton.disabled = true;
    try {
      const res = await this.gw.call("chat.send", { sessionKey: s.key, message: "/stop" });
      if (s !== this.s) return;
      if (res.error) s.notes.push({ kind: "error", title: "/stop", body: res.error, anchor: null, after: s.tick });
      this.refreshMeta();
    } catch (err) {
      failed("Stopping the run", err);
    } finally {
      this.stopping = false;
      this.stopButton.disabled = false;
      if (s === this.s) this.renderAll();
    }
  }

  // --- the composer's state, the run bar -----------------------------------------------------------------------

  busy() {
    const s = this.s;
    if (!s) return false;
    if ([...s.runs.values()].some((r) => !r.ended)) return true;
    if (s.pending.some((p) => p.state === "queued")) return true;
    return Boolean(s.stats && s.stats.isProcessing); // a run this tab did not see start (another client, a reload)
  }

  updateRunbar() {
    const s = this.s;
    const busy = this.busy();
    this.runbar.hidden = !busy;
    const queued = s.pending.filter((p) => p.state === "queued").length;
    const paused = this.waitingApprovals().length || [...s.runs.values()].some((r) => r.paused && !r.ended);
    const doing = paused ? "The agent waits for your approval" : "The agent is working";
    this.runText.textContent = queued ? `${doing} · ${queued} queued` : paused ? doing : `${doing}…`;
  }

  updateComposer() {
    const s = this.s;
    if (!s) return;
    const ro = s.info.readOnly;
    this.composer.hidden = Boolean(ro);
    this.readonly.hidden = !ro;
    this.readonly.textContent = ro || "";
    const online = this.gw.state === "open";
    this.sendButton.disabled = this.sending || !online || !this.input.value.trim();
    this.sendButton.title = online ? "" : "Not connected to the gateway";
  }

  // --- scrolling -----------------------------------------------------------------------------------------------

  /** Change the transcript, then keep it at the bottom if it was there (else offer to jump there). The keyboard stays
   * on the control it was on, drawn again (by its data-key: a tool card, "Show all", …), even if it moved from the
   * live part to the stored one. */
  keepBottom(change) {
    const stick = this.stick;
    const active = document.activeElement;
    const inside = active && this.transcript.contains(active);
    // a control whose redraw had not come yet (its run left the live part before the stored transcript was read
    // again) is still the one the keyboard was on, as long as nothing else took the focus meanwhile
    const key = inside ? /** @type {HTMLElement} */ (active).dataset.key : !active || active === document.body ? this.focusKey : null;
    change();
    if (key && !this.transcript.contains(document.activeElement)) {
      const again = this.transcript.querySelector(`[data-key="${CSS.escape(key)}"]`);
      again?.focus({ preventScroll: true });
      this.focusKey = again ? null : key;
    } else {
      this.focusKey = null;
    }
    if (stick) this.toBottom();
    else if (this.transcript.scrollHeight > this.transcript.clientHeight) this.jump.hidden = false;
  }

  toBottom() {
    this.transcript.scrollTop = this.transcript.scrollHeight;
    this.stick = true;
    this.jump.hidden = true;
  }

  // --- slash-command completion --------------------------------------------------------------------------------

  complete() {
    const value = this.input.value;
    if (!/^\/\S*$/.test(value) || this.dismissed === value) {
      this.closeCompletion();
      return;
    }
    const typed = value.toLowerCase();
    this.matches = this.choices.filter((c) => c.insert.toLowerCase().startsWith(typed) || c.usage.toLowerCase().startsWith(typed));
    if (!this.matches.length) {
      this.closeCompletion();
      return;
    }
    this.active = 0;
    fill(
      this.listbox,
      this.matches.map((c, i) => {
        const option = h(
          "li",
          { role: "option", id: `chat-command-${i}`, "aria-selected": "false" },
          h("code", c.usage),
          h("span.hint", c.description),
        );
        option.addEventListener("mousedown", (ev) => ev.preventDefault()); // keep the focus in the textarea
        option.addEventListener("click", () => this.pick(c));
        return option;
      }),
    );
    const said = `${this.matches.length} commands: the arrow keys choose, Enter or Tab picks, Escape closes`;
    this.listbox.hidden = false;
    if (this.announce.textContent !== said) this.say(said); // on opening, and when typing changes how many
    this.setActive(0);
  }

  setActive(i) {
    const options = [...this.listbox.children];
    this.active = (i + options.length) % options.length;
    options.forEach((o, k) => o.setAttribute("aria-selected", k === this.active ? "true" : "false"));
    const current = options[this.active];
    this.input.setAttribute("aria-activedescendant", current.id);
    current.scrollIntoView({ block: "nearest" });
  }

  closeCompletion() {
    if (!this.listbox) return;
    this.listbox.hidden = true;
    this.matches = [];
    this.input.removeAttribute("aria-activedescendant");
  }

  pick(choice) {
    this.input.value = choice.insert;
    this.dismissed = choice.insert;
    this.closeCompletion();
    this.input.focus();
    this.input.setSelectionRange(choice.insert.length, choice.insert.length);
    this.updateComposer();
  }

  onKey(ev) {
    const open = !this.listbox.hidden && this.matches && this.matches.length;
    if (open) {
      if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {
        ev.preventDefault();
        this.setActive(this.active + (ev.key === "ArrowDown" ? 1 : -1));
        return;
      }
      if (ev.key === "Escape") {
        ev.preventDefault();
        ev.stopPropagation();
        this.dismissed = this.input.value;
        this.closeCompletion();
        return;
      }
      const choice = this.matches[this.active];
      const complete = choice && choice.insert.trim() === this.input.value.trim(); // already typed in full
      if (ev.key === "Tab" && !ev.shiftKey) {
        ev.preventDefault();
        this.pick(choice);
        return;
      }
      if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing && !complete) {
        ev.preventDefault();
        this.pick(choice);
        return;
      }
    }
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      this.submit();
    }
  }
}

// --- small pieces of the transcript ----------------------------------------------------------------------------

function messageHead(who, timestamp, extra) {
  return h(
    "div.msg-head",
    h("span.who", who),
    extra ? h("span.msg-extra", extra) : null,
    timestamp ? h("time", { datetime: new Date(timestamp).toISOString() }, formatTime(timestamp)) : null,
  );
}

function userNode(content, timestamp, gw = null) {
  const blocks = typeof content === "string" ? [{ type: "text", text: content }] : Array.isArray(content) ? content : [];
  const body = [];
  for (const b of blocks) {
    if (!b || typeof b !== "object") continue;
    if (b.type === "text") body.push(h("div.user-text", String(b.text ?? "")));
    else if (b.type === "image") body.push(imageNode(b, null, gw)); // a private upload needs the token
  }
  return h("div.msg.user", messageHead("You", timestamp), body);
}

function pendingNode(p) {
  const badge =
    p.state === "queued"
      ? h("span.badge.warn", `Queued (#${p.position})`)
      : p.state === "sending"
        ? h("span.badge", "Sending…")
        : null;
  return h("div.msg.user.pending", { dataset: { state: p.state } }, messageHead("You", null, badge), h("div.user-text", String(p.text)));
}

function thinkingNode(b) {
  const text = String(b.thinking || b.text || "");
  return h("details.thinking", h("summary", text ? "Thinking" : "Thinking (hidden by the provider)"), text ? h("div.thinking-text", text) : null);
}

function metaItem(label, value, title) {
  return h("span.meta-item", { title }, h("span.meta-label", label), " ", h("span.meta-value", value));
}

function tokenUse(tokens, use) {
  const used = use ? use.used : tokens ? tokens.total : 0;
  if (!use || !use.limit) return [formatNumber(used), h("span.hint", " · no budget")];
  const meter = h("meter", { min: "0", max: String(use.limit), value: String(Math.min(used, use.limit)), high: String(use.limit * 0.8), optimum: "0", "aria-label": "Share of the token budget used" });
  return [`${formatNumber(used)} / ${formatNumber(use.limit)} `, meter];
}

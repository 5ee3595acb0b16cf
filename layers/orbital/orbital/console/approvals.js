// The tool calls waiting for the owner's answer, in every session, kept current for the whole page: read with
// `approval.list` each time the socket (re)connects, then followed by the events `approval.requested` (a new one) and
// `approval.resolved` (decided: here, elsewhere, or by its timeout); events that come while a read is under way are
// kept over its answer, which may be older than they are. The shell shows their count on every view (a
// link to the session of the oldest); the chat view shows a session's own as cards with Approve / Deny / Approve for
// this session. Arguments come masked by the gateway; they are shown as text, never as HTML.
// A gateway without approvals (an older one, or GSV's own) answers `approval.list` with an error: nothing is shown.

export class Approvals {
  /** @param {import("./gsv.js").Gateway} gw */
  constructor(gw) {
    this.gw = gw;
    this.pending = new Map(); // approvalId → approval
    this.listeners = new Set();
    this.seq = 0; // the latest approval.list read: an older answer arriving last is dropped
    /** What the events said while the latest read was under way (its answer may predate them), or null. */
    this.since = null;
    this.offs = [
      gw.on("status", ({ state }) => state === "open" && this.load()),
      gw.on("approval.requested", (a) => this.add(a)),
      gw.on("approval.resolved", (r) => this.settled(r)),
    ];
    if (gw.state === "open") this.load();
  }

  /** Listen to changes: `fn({type: "list"|"requested"|"resolved", approval?, resolution?})`; returns the stop. */
  on(fn) {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  _emit(change) {
    for (const fn of [...this.listeners]) {
      try {
        fn(change);
      } catch (err) {
        console.error("an approvals listener failed", err);
      }
    }
  }

  /** Read every pending approval again (after a (re)connect: events missed meanwhile are in it). */
  async load() {
    const mine = ++this.seq;
    const since = { added: new Map(), settled: new Set() };
    this.since = since;
    let res;
    try {
      res = await this.gw.call("approval.list", {});
    } catch {
      if (mine === this.seq) this.since = null;
      return; // no approvals on this gateway, or not now: the next connect reads again
    }
    if (mine !== this.seq) return;
    this.since = null;
    // the answer was read before the events that came meanwhile: they stay applied (a decision is final)
    this.pending.clear();
    for (const a of Array.isArray(res && res.approvals) ? res.approvals : []) {
      if (valid(a) && !since.settled.has(a.approvalId)) this.pending.set(a.approvalId, a);
    }
    for (const [id, a] of since.added) if (!since.settled.has(id)) this.pending.set(id, a);
    this._emit({ type: "list" });
  }

  /** A new pending approval (from its event, or a `paused` chat event that carries it). */
  add(approval) {
    if (!valid(approval) || (approval.state && approval.state !== "pending")) return;
    const known = this.pending.has(approval.approvalId);
    this.pending.set(approval.approvalId, approval);
    this.since?.added.set(approval.approvalId, approval);
    if (!known) this._emit({ type: "requested", approval });
  }

  /** An approval was decided (or timed out, or its run stopped): it is no longer pending. `local`: this page's own
   * answer just came back (the gateway's `approval.resolved`, which says who decided, comes too). */
  settled(resolution, local = false) {
    if (!resolution || typeof resolution.approvalId !== "string") return;
    const approval = this.pending.get(resolution.approvalId) || null;
    this.pending.delete(resolution.approvalId);
    this.since?.settled.add(resolution.approvalId);
    this._emit({ type: "resolved", approval, resolution, local });
  }

  /** The pending approvals, oldest first; of one session when `matches(sessionKey)` is given. */
  list(matches = null) {
    const all = [...this.pending.values()].filter((a) => !matches || matches(a.sessionKey));
    return all.sort((a, b) => (a.requestedAt || 0) - (b.requestedAt || 0));
  }

  /** Answer one: `approval.resolve`. Resolves with the gateway's answer (`resolved: false` and a `message` when it
   * had already been decided); rejects with a GatewayError (404 unknown, 403 not allowed). */
  async resolve(approvalId, decision, { session = false } = {}) {
    const params = { approvalId, decision, via: "console" }; // where the answer came from, in the history
    if (session) params.remember = "session";
    try {
      const res = await this.gw.call("approval.resolve", params);
      if (this.pending.has(approvalId)) this.settled({ approvalId, decision: res.decision || decision }, true);
      return res;
    } catch (err) {
      if (err.code === 404 && this.pending.has(approvalId)) this.settled({ approvalId, decision: null }, true); // gone
      throw err;
    }
  }

  destroy() {
    for (const off of this.offs) off();
    this.listeners.clear();
  }
}

function valid(a) {
  return Boolean(a && typeof a === "object" && typeof a.approvalId === "string" && a.approvalId);
}

// --- showing one -----------------------------------------------------------------------------------------------

/** "9 min 12 s left", "1 h 05 min left", "expiring" from an `expiresAt` (ms since the epoch). */
export function timeLeft(expiresAt, now = Date.now()) {
  if (typeof expiresAt !== "number") return "";
  const left = Math.floor((expiresAt - now) / 1000);
  if (left <= 0) return "expiring";
  const h = Math.floor(left / 3600);
  const m = Math.floor((left % 3600) / 60);
  const s = left % 60;
  if (h) return `${h} h ${String(m).padStart(2, "0")} min left`;
  if (m) return `${m} min ${String(s).padStart(2, "0")} s left`;
  return `${s} s left`;
}

const DECIDED = { approve: "Approved", deny: "Denied", timeout: "Timed out (denied)", cancel: "Cancelled" };

/** An `approval.resolved` as one sentence: "Approved laptop__Bash by Ann via telegram" ("by you" when `selfId`, this
 * page's client id, decided). */
export function decidedText(resolution, tool, selfId = null) {
  const name = tool || resolution.tool || "the call";
  if (resolution.decision === "timeout") return `Nobody answered in time: ${name} was denied`;
  if (resolution.decision === "cancel") return `Cancelled ${name}: the run was stopped`;
  const what = DECIDED[resolution.decision] || String(resolution.decision || "Decided");
  const by = resolution.by && typeof resolution.by === "object" ? resolution.by : {};
  const who = selfId && by.id === selfId ? "you" : String(by.label || by.id || "").trim();
  const via = String(resolution.via || "").trim();
  let text = `${what} ${tool || resolution.tool || ""}`.trim();
  if (who) text += ` by ${who}`;
  if (via) text += ` via ${via}`;
  return text;
}

/** The sources of a tainted run, one line each ([] for an untainted one). */
export function taintSources(taint) {
  if (!taint || typeof taint !== "object" || !taint.tainted) return [];
  const sources = Array.isArray(taint.sources) ? taint.sources.filter((s) => s && typeof s === "object") : [];
  if (!sources.length) return ["content from someone other than you"];
  return sources.map((s) => {
    const kind = String(s.kind || "unknown");
    const detail = String(s.detail || "").trim();
    return detail ? `${kind}: ${detail}` : kind;
  });
}

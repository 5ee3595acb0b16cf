// Spend in dollars, from `spend.status` {currency, timeZone, periods: [{period, scope, usedUsd, reservedUsd,
// limitUsd, resetsAt}], top: {sessions: [{sessionKey, usedUsd}], jobs: [{jobId, usedUsd}]}, alertAt}:
// - the Settings card: used / reserved / limit per period and scope, and the period's top sessions and cron jobs;
// - the Chat strip's items: this session's, today's and this month's spend (gateway-wide), each with its limit;
// - the `spend.alert` event {scope, period, usedUsd, limitUsd, alertAt} as a notice.
// A gateway without spend.status (or a token that may not read it) shows the card's reason and no strip items.

import { errorText, fill, formatTime, h } from "./ui.js";

const PERIOD_WORDS = { session: "this session", daily: "today", monthly: "this month" };

export function usd(value) {
  const n = Number(value);
  return Number.isFinite(n) ? `$${n.toFixed(2)}` : "—";
}

function scopeText(scope) {
  const s = String(scope || "");
  if (s === "global") return "All runs";
  if (s.startsWith("agent:")) return `Agent ${s.slice(6)}`;
  if (s.startsWith("session:")) return `Session ${s.slice(8)}`;
  if (s.startsWith("cron:")) return `Cron job ${s.slice(5)}`;
  return s;
}

function used(p) {
  return (Number(p.usedUsd) || 0) + (Number(p.reservedUsd) || 0);
}

/** The share of a limit spent, as a meter (null without a limit). */
function meter(p) {
  const limit = Number(p.limitUsd);
  if (!(limit > 0)) return null;
  return h("meter", { min: "0", max: String(limit), value: String(Math.min(used(p), limit)), high: String(limit * 0.8), optimum: "0", "aria-label": "Share of the spend limit used" });
}

/** The Chat strip's spend items, [label, value, title]: this session's and the gateway's day and month. */
export function spendItems(status) {
  const periods = (status && Array.isArray(status.periods) && status.periods) || [];
  const items = [];
  for (const period of ["session", "daily", "monthly"]) {
    const p = periods.find((x) => x && x.period === period && (period === "session" ? String(x.scope || "").startsWith("session:") : x.scope === "global"));
    if (!p) continue;
    const limit = p.limitUsd == null ? null : Number(p.limitUsd);
    const value = limit == null ? [usd(used(p)), h("span.hint", " · no cap")] : [`${usd(used(p))} / ${usd(limit)} `, meter(p)];
    const reserved = Number(p.reservedUsd) > 0 ? `, ${usd(p.reservedUsd)} of it reserved for calls in flight` : "";
    items.push([period === "session" ? "Spend" : period === "daily" ? "Spend today" : "Spend this month", value, `Spent ${PERIOD_WORDS[period]}${period === "session" ? "" : ", all sessions"}${reserved}`]);
  }
  return items;
}

/** The text of a `spend.alert` notice. */
export function spendAlertText(a) {
  const share = Math.round((Number(a && a.alertAt) || 0.8) * 100);
  const period = a && a.period ? `${a.period} ` : "";
  return `Spend alert: ${scopeText(a && a.scope)} has used ${usd(a && a.usedUsd)} of its ${usd(a && a.limitUsd)} ${period}cap (${share}% reached).`;
}

/** The Settings card's body: a table of the periods and the top sessions and jobs; `load()` reads it again. */
export class SpendCard {
  constructor(gw) {
    this.gw = gw;
    this.seq = 0;
    this.el = h("div.spend-card", h("p.muted", "Loading…"));
  }

  async load() {
    const mine = ++this.seq;
    try {
      const status = await this.gw.call("spend.status", {});
      if (mine === this.seq) this.render(status || {});
    } catch (err) {
      if (mine === this.seq) fill(this.el, h("p.error", { role: "alert" }, `Could not read the spend: ${errorText(err)}`));
    }
  }

  render(status) {
    const periods = Array.isArray(status.periods) ? status.periods : [];
    const rows = periods.map((p) =>
      h("tr", { dataset: { period: p.period, scope: p.scope } },
        h("td", String(p.period || "")),
        h("td", scopeText(p.scope)),
        h("td.num", usd(p.usedUsd)),
        h("td.num", usd(p.reservedUsd)),
        h("td.num", p.limitUsd == null ? "no cap" : [usd(p.limitUsd), " ", meter(p)]),
        h("td", p.resetsAt ? formatTime(p.resetsAt) : "—"),
      ),
    );
    const table = h("table.spend-periods",
      h("caption", `In ${status.currency || "USD"}, periods in ${status.timeZone || "UTC"}; an alert at ${Math.round((Number(status.alertAt) || 0.8) * 100)}% of a cap.`),
      h("thead", h("tr", ["Period", "Scope", "Used", "Reserved", "Limit", "Resets"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", rows.length ? rows : h("tr", h("td", { colSpan: 6 }, "Nothing spent yet."))),
    );
    const top = status.top || {};
    const list = (title, entries, name) =>
      h("div.spend-top", h("h3", title),
        Array.isArray(entries) && entries.length
          ? h("ol", entries.map((e) => h("li", h("code", String(e[name] || "")), " ", usd(e.usedUsd))))
          : h("p.muted", "None this period."));
    fill(this.el,
      h("p.hint", "Set a cap with config.set spend.limits.daily 5 (USD), per agent under agents.{id}.spend.limits, per cron job with spendLimitUsd."),
      table,
      list("Top sessions", top.sessions, "sessionKey"),
      list("Top cron jobs", top.jobs, "jobId"),
    );
  }
}

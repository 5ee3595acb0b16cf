// The Settings card of the local backups, from `backup.status` {available, reason?, every, keep, dir, running,
// last: {name, at, sizeBytes, items, objects, verified} | null, next: ms | null, count}:
// - the last backup (when, its size, how many items and files, whether it was verified), when the next one is due
//   (or that automatic backups are off) and how many are kept where;
// - "Back up now" calls `backup.run` (it answers with the new backup, once it is written and verified; 409 while
//   one runs) and reads the status again;
// - without local backups (`available: false`: on AWS) the gateway's reason, which says what to use there instead
//   (point-in-time recovery of the table, object versions of the bucket, `orbital export --stack`). No button.
// A gateway without backup.status (or a token that may not read it) shows why the card is empty.

import { busy, errorText, fill, formatBytes, formatNumber, formatTime, h, toast } from "./ui.js";

const SEE_README = "The README's Backups section has the commands to restore.";

function sentence(text) {
  const s = String(text || "").trim();
  return s ? s[0].toUpperCase() + s.slice(1) + (/[.!?]$/.test(s) ? "" : ".") : "";
}

function when(value) {
  if (value === null || value === undefined || value === "") return null;
  const ms = typeof value === "number" ? value : Date.parse(String(value));
  return Number.isFinite(ms) ? ms : null;
}

/** The card's body; `load()` reads backup.status again. */
export class BackupCard {
  constructor(gw) {
    this.gw = gw;
    this.seq = 0;
    this.el = h("div.backup-card", { "aria-live": "polite" }, h("p.muted", "Loading…"));
  }

  async load() {
    const mine = ++this.seq;
    try {
      const status = await this.gw.call("backup.status", {});
      if (mine === this.seq) this.render(status || {});
    } catch (err) {
      if (mine === this.seq) fill(this.el, h("p.error", { role: "alert" }, `Could not read the backups: ${errorText(err)}`));
    }
  }

  render(status) {
    if (status.available === false) {
      this.el.dataset.available = "false";
      fill(this.el, h("p.backup-reason", sentence(status.reason) || "This gateway takes no backups of its own."), h("p.hint", SEE_README));
      return;
    }
    this.el.dataset.available = "true";
    const last = status.last || null;
    const next = when(status.next);
    const row = (term, ...def) => [h("dt", term), h("dd", def)];
    const lastCell = last
      ? [
          h("span.backup-last-at", formatTime(when(last.at))),
          " ",
          h("code.backup-name", String(last.name || "")),
          h("small.muted.block", `${formatNumber(Number(last.items) || 0)} items, ${formatNumber(Number(last.objects) || 0)} files`,
            last.verified ? " · verified" : " · not verified"),
        ]
      : h("span.muted", "None yet.");
    const every = status.every && status.every !== "off" ? String(status.every) : null;
    const nextCell = status.running
      ? h("span", "A backup is being written now.")
      : next !== null
        ? [formatTime(next), every ? h("small.muted.block", `Every ${every}.`) : null]
        : h("span.muted", "Automatic backups are off: set backup.every (e.g. 24h).");
    const facts = h("dl.facts.backup-facts",
      row("Last backup", lastCell),
      row("Size", last ? h("span.backup-size", formatBytes(Number(last.sizeBytes) || 0)) : "—"),
      row("Next", nextCell),
      row("Kept", `${formatNumber(Number(status.count) || 0)} of at most ${formatNumber(Number(status.keep) || 0)}`, status.dir ? h("small.muted.block", h("code", String(status.dir))) : null),
    );
    facts.dataset.next = next === null ? "" : String(next);
    if (last) facts.dataset.last = String(last.name || "");
    const run = h("button.primary", { type: "button", disabled: Boolean(status.running) }, "Back up now");
    const error = h("p.error", { role: "alert", hidden: true });
    run.addEventListener("click", async () => {
      error.hidden = true;
      const done = busy(run, "Backing up…");
      try {
        const made = await this.gw.call("backup.run", {});
        toast(`Backed up: ${made && made.name ? made.name : "done"} (${formatBytes(Number(made && made.sizeBytes) || 0)}).`, "ok");
        await this.load();
      } catch (err) {
        error.textContent = `Could not back up: ${errorText(err)}`;
        error.hidden = false;
      } finally {
        done();
      }
    });
    fill(this.el, facts, h("div.row", run), error);
  }
}

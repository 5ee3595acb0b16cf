// Agents: the gateway's agents (the default one, those of `agents.list`, any other with sessions), each with its
// number of sessions and when it was last active, and a "Clone" action: it asks the new agent's id, copies the agent
// inside the gateway (sessions, workspace files, memory, skills, cron jobs, all under the new id; the original is
// not changed; bindings are not copied) and shows what was copied. An id in use is refused unless the user chooses
// to replace that agent (after a second confirmation).
// Methods: agents.list, agents.clone (an admin's: the view says so to anyone else).

import { busy, confirmAction, dialog, empty, errorText, field, formatTime, h, header, Loader, toast } from "../ui.js";

export const AGENT_ID = /^[a-z0-9][a-z0-9_-]{0,63}$/;

export default {
  id: "agents",
  title: "Agents",
  icon: "agents",
  mount(container, ctx) {
    const view = new AgentsView(container, ctx);
    return () => view.destroy();
  },
};

/** What a clone copied, in words. */
export function cloneText(res) {
  const n = (count, one) => `${count} ${one}${count === 1 ? "" : "s"}`;
  return `${res.to} is a copy of ${res.from}: ${n(res.sessions, "session")}, ${n(res.objects, "file")}, ${n(res.cronJobs, "cron job")} (${n(res.items, "item")}).`;
}

class AgentsView {
  constructor(container, ctx) {
    this.gw = ctx.gw;
    this.navigate = ctx.navigate;
    this.loader = new Loader(this.gw, () => this.load());
    this.body = h("div.agents-body", { "aria-live": "polite" }, h("p.muted", "Loading…"));
    this.result = h("div.agents-result", { role: "status" });
    container.append(
      header("Agents", this.loader.button),
      h(
        "section.card.agents-list",
        { "aria-labelledby": "agents-list-title" },
        h("h2", { id: "agents-list-title" }, "Agents"),
        h("p.hint", "Each agent has its own sessions, workspace files, memory and schedules. “Clone” copies one to a new id inside this gateway: the copy starts with everything the original knows, and the original is not changed. Channel bindings are not copied."),
        this.result,
        this.body,
      ),
    );
    this.loader.start();
  }

  get alive() {
    return this.loader.alive;
  }

  destroy() {
    this.loader.stop();
  }

  async load() {
    let agents;
    try {
      agents = (await this.gw.call("agents.list", {})).agents || [];
    } catch (err) {
      if (this.alive) this.body.replaceChildren(h("p.error", { role: "alert" }, `Could not read the agents: ${errorText(err)}`));
      return;
    }
    if (!this.alive) return;
    this.ids = new Set(agents.map((a) => a.id));
    if (!agents.length) {
      this.body.replaceChildren(empty("No agents yet."));
      return;
    }
    this.body.replaceChildren(
      h(
        "div.table-wrap",
        h(
          "table.agents",
          h("thead", h("tr", ["Agent", "Sessions", "Last active", ""].map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", agents.map((a) => this.row(a))),
        ),
      ),
    );
  }

  row(a) {
    const clone = h("button.small", { type: "button", "aria-label": `Clone ${a.id}` }, "Clone");
    clone.addEventListener("click", () => this.clone(a, clone));
    return h(
      "tr",
      { dataset: { agent: a.id } },
      h("td", { "data-label": "Agent" }, h("strong", a.id), a.default ? [" ", h("span.badge", "default")] : null),
      h("td", { "data-label": "Sessions" }, String(a.sessions ?? 0)),
      h("td", { "data-label": "Last active" }, a.lastActiveAt ? formatTime(a.lastActiveAt) : "never"),
      h("td.actions", clone),
    );
  }

  async clone(a, button) {
    const to = h("input", { name: "to", autocomplete: "off", spellcheck: "false", required: true, placeholder: `e.g. ${a.id}-copy` });
    const replace = h("input", { type: "checkbox", name: "replace" });
    const error = h("p.error", { role: "alert", hidden: true });
    /** @type {{from: string, to: string, replace?: boolean} | null} */
    let params = null;
    const ok = await dialog(
      `Clone ${a.id}`,
      [
        h("p", `The new agent gets a copy of ${a.id}'s sessions, workspace files, memory, skills and cron jobs. ${a.id} is not changed.`),
        field("New agent id", to, "Lowercase letters, digits, - and _."),
        h("label.check", replace, " Replace an agent that already has this id"),
        error,
      ],
      [
        { label: "Cancel", value: false },
        { label: "Clone", value: true, kind: "primary" },
      ],
      () => {
        const id = to.value.trim();
        const problem = !AGENT_ID.test(id) ? "An agent id is lowercase letters, digits, - and _ (at most 64), starting with a letter or digit." : id === a.id ? "Choose an id other than the original's." : this.ids?.has(id) && !replace.checked ? `${id} already exists: choose another id, or replace it.` : null;
        if (problem) {
          error.textContent = problem;
          error.hidden = false;
          return false;
        }
        params = { from: a.id, to: id };
        if (replace.checked) params.replace = true;
        return true;
      },
    );
    if (!ok || !params) return;
    if (params.replace && !(await confirmAction(`Replace ${params.to}?`, `${params.to}'s own sessions, files and cron jobs are deleted and replaced by a copy of ${a.id}.`, "Replace"))) return;
    const undo = busy(button, "Cloning…");
    try {
      const res = await this.gw.call("agents.clone", params);
      const text = cloneText(res);
      toast(text, "ok");
      if (!this.alive) return;
      const open = h("a", { href: `#/chat/${encodeURIComponent(`agent:${res.to}:main`)}` }, `Chat with ${res.to}`);
      this.result.replaceChildren(h("p.ok", text, " ", open));
    } catch (err) {
      if (this.alive) this.result.replaceChildren(h("p.error", { role: "alert" }, `Could not clone ${a.id}: ${errorText(err)}`));
    } finally {
      undo();
      if (this.alive) await this.loader.refresh();
    }
  }
}

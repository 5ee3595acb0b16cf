// MCP: the remote MCP servers whose tools the agent may call (`mcp.servers.<name>` in the configuration). Each server
// shows its status, tool count, trust, auth state, when it was last checked and its last error, from the gateway's
// cache (`mcp.list`, which does not connect). "Test" connects now and lists the tools (`mcp.test`); "Log in" asks the
// gateway for the authorization URL of a server that needs one (`mcp.login`) and offers it as a link to open;
// "Add server" / "Edit" write the server's whole object with `config.set` (header values and the client secret are
// secrets: shown as the mask, which written back keeps the stored value); "Disable"/"Enable" and "Remove" too.
// Each tool has a switch: turning one off adds its name to the server's `tools.deny`, turning it on takes it out
// (and adds it to `tools.allow` when an allow list leaves it out).
// Everything a server says (tool names, descriptions, errors) is a stranger's text: it goes in as text, never HTML.

import { busy, clip, confirmAction, dialog, empty, errorText, failed, field, formatTime, h, header, icon, Loader, rerender, safeUrl, toast } from "../ui.js";

const NAME = /^[A-Za-z0-9-]{1,32}$/;
const HEADER_NAME = /^[!#$%&'*+^_`|~0-9A-Za-z-]+$/;
const MASK = "***";
const MIN_TIMEOUT_MS = 1000;
const MAX_TIMEOUT_MS = 300000;
const CALLBACK_PATH = "/api/mcp/oauth/callback";
const STATUS_KIND = { ok: "ok", error: "error", "needs-login": "warn", disabled: "", unknown: "" };

export default {
  id: "mcp",
  title: "MCP",
  icon: "mcp",
  mount(container, ctx) {
    const view = new McpView(container, ctx);
    return () => view.destroy();
  },
};

/** A tool name pattern as the gateway matches it: trimmed, `*` alone matches all, without `*` the name exactly, else
 * an anchored glob where only `*` is special. */
export function matchesTool(pattern, tool) {
  const p = String(pattern ?? "").trim();
  if (!p) return false;
  if (p === "*") return true;
  if (!p.includes("*")) return p === tool;
  const source = p.split("*").map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join(".*");
  return new RegExp(`^${source}$`, "s").test(tool);
}

/** Whether a tool passes a server's `tools` {allow, deny}, as the gateway judges it: a pattern matches the server's
 * own name for the tool (`tool`) or the name the model sees (`exposed`); an allow list (when not empty) must match
 * it, and no deny pattern may. */
export function toolAllowed(tools, tool, exposed = tool) {
  const allow = Array.isArray(tools?.allow) ? tools.allow : [];
  const deny = Array.isArray(tools?.deny) ? tools.deny : [];
  const hits = (p) => matchesTool(p, tool) || matchesTool(p, exposed);
  if (allow.length && !allow.some(hits)) return false;
  return !deny.some(hits);
}

/** The server's `tools` after switching a tool on or off (by the server's own name for it, `tool`); lists that end
 * up empty are left out. */
export function switchTool(tools, tool, on, exposed = tool) {
  let allow = Array.isArray(tools?.allow) ? [...tools.allow] : [];
  let deny = Array.isArray(tools?.deny) ? [...tools.deny] : [];
  const named = (p) => [tool, exposed].includes(String(p).trim());
  const hits = (p) => matchesTool(p, tool) || matchesTool(p, exposed);
  if (on) {
    deny = deny.filter((p) => !named(p));
    if (allow.length && !allow.some(hits)) allow.push(tool);
  } else {
    allow = allow.filter((p) => !named(p));
    if (!deny.some(hits)) deny.push(tool);
  }
  const out = {};
  if (allow.length) out.allow = allow;
  if (deny.length) out.deny = deny;
  return out;
}

/** Header lines ("Name: value", one a line) as an object; throws an Error naming the bad line. */
export function parseHeaders(text) {
  const headers = {};
  for (const raw of String(text ?? "").split("\n")) {
    const line = raw.trim();
    if (!line) continue;
    const at = line.indexOf(":");
    const key = at < 0 ? "" : line.slice(0, at).trim();
    const value = at < 0 ? "" : line.slice(at + 1).trim();
    if (!key || !value) throw new Error(`A header is “Name: value” (the line starting “${line.slice(0, 20)}”).`);
    if (!HEADER_NAME.test(key)) throw new Error(`“${key.slice(0, 40)}” is not a header name (letters, digits and -).`);
    headers[key] = value;
  }
  return headers;
}

function patterns(text) {
  return String(text ?? "")
    .split(/[\n,]/)
    .map((p) => p.trim())
    .filter(Boolean);
}

class McpView {
  constructor(container, ctx) {
    this.gw = ctx.gw;
    this.loader = new Loader(this.gw, () => this.load());
    this.servers = [];
    this.config = {};
    this.openTools = new Set(); // the servers whose tool list is unfolded: it stays so across redraws
    this.addButton = h("button.primary", { type: "button", onclick: () => this.edit(null) }, icon("plus"), " Add server");
    this.body = h("div.mcp-body", { "aria-live": "polite" }, h("p.muted", "Loading…"));
    container.append(
      header("MCP servers", this.loader.button, this.addButton),
      h(
        "p.hint.mcp-intro",
        "The agent calls the tools of these servers as mcp__server__tool, asking for approval as for any risky tool. An untrusted server's results make the agent's next risky call ask too.",
      ),
      this.body,
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
    let listed;
    let configured;
    try {
      [listed, configured] = await Promise.all([this.gw.call("mcp.list", {}), this.gw.call("config.get", { path: "mcp.servers" })]);
    } catch (err) {
      if (this.alive) this.body.replaceChildren(h("p.error", { role: "alert" }, `Could not read the MCP servers: ${errorText(err)}`));
      return;
    }
    if (!this.alive) return;
    this.servers = Array.isArray(listed?.servers) ? listed.servers.filter((s) => s && typeof s === "object") : [];
    this.config = configured && configured.exists !== false && configured.value && typeof configured.value === "object" ? configured.value : {};
    const known = new Set(this.servers.map((s) => s.name));
    for (const name of Object.keys(this.config)) {
      if (!known.has(name)) this.servers.push({ name, url: this.config[name]?.url, status: "unknown", tools: [] });
    }
    this.servers.sort((a, b) => String(a.name).localeCompare(String(b.name)));
    if (!this.servers.length) {
      this.body.replaceChildren(empty("No MCP servers yet. “Add server” connects one by its URL."));
      return;
    }
    rerender(this.body, this.servers.map((s) => this.card(s)));
  }

  card(s) {
    const name = String(s.name);
    const conf = this.config[name] || {};
    const status = String(s.status || "unknown");
    const auth = String(s.auth || (conf.oauth ? "needs-login" : "none"));
    const enabled = s.enabled ?? conf.enabled ?? true;
    const tools = Array.isArray(s.tools) ? s.tools.filter((t) => t && typeof t === "object") : [];
    const count = typeof s.toolCount === "number" ? s.toolCount : tools.length;
    const test = h("button.small", { type: "button", dataset: { key: `test:${name}` }, "aria-label": `Test ${name}` }, "Test");
    test.addEventListener("click", () => this.test(name, test));
    const actions = [test];
    if (conf.oauth || auth !== "none") {
      const login = h("button.small", { type: "button", dataset: { key: `login:${name}` }, "aria-label": `Log in to ${name}` }, "Log in");
      login.addEventListener("click", () => this.login(name, login));
      actions.push(login);
    }
    const editButton = h("button.small", { type: "button", dataset: { key: `edit:${name}` }, "aria-label": `Edit ${name}` }, "Edit");
    editButton.addEventListener("click", () => this.edit(name));
    const toggle = h("button.small", { type: "button", dataset: { key: `toggle:${name}` }, "aria-label": `${enabled ? "Disable" : "Enable"} ${name}` }, enabled ? "Disable" : "Enable");
    toggle.addEventListener("click", () => this.setEnabled(name, !enabled, toggle));
    const remove = h("button.small.danger", { type: "button", dataset: { key: `remove:${name}` }, "aria-label": `Remove ${name}` }, "Remove");
    remove.addEventListener("click", () => this.remove(name, remove));
    actions.push(editButton, toggle, remove);
    const badges = [
      h(`span.badge.status${STATUS_KIND[status] ? `.${STATUS_KIND[status]}` : ""}`, { title: "Status" }, status),
      h("span.badge.trust", { title: "Trust" }, String(s.trust || conf.trust || "untrusted")),
      auth !== "none" ? h(`span.badge.auth${auth === "ok" ? ".ok" : ".warn"}`, { title: "Login" }, auth === "ok" ? "logged in" : "needs login") : null,
    ];
    const [error] = s.lastError ? clip(s.lastError, 500) : [null];
    return h(
      "section.card.mcp-server",
      { dataset: { server: name }, "aria-label": name, class: enabled ? "" : "disabled" },
      h("div.mcp-head", h("h2", name), h("div.mcp-badges", badges)),
      h("p.mcp-url.muted", String(s.url || conf.url || "")),
      h(
        "p.mcp-facts",
        h("span.tool-count", `${count} tool${count === 1 ? "" : "s"}`),
        " · ",
        h("span", String(s.transport || conf.transport || "streamable-http")),
        " · ",
        h("span.checked", s.checkedAt ? `checked ${formatTime(s.checkedAt)}` : "not checked yet"),
      ),
      error ? h("p.error.last-error", { role: "status" }, `Last error: ${error}`) : null,
      h("div.row.mcp-actions", actions),
      this.toolList(name, conf, tools, s.toolsTruncated ? count : null),
    );
  }

  toolList(name, conf, tools, of = null) {
    if (!tools.length) return h("p.muted.no-tools", "No tools known yet: “Test” lists them.");
    const items = tools.map((t) => {
      const own = String(t.tool ?? t.name ?? "");
      const exposed = String(t.name ?? own);
      const allowed = t.allowed ?? toolAllowed(conf.tools, own, exposed);
      const box = h("input", { type: "checkbox", checked: allowed, dataset: { key: `tool:${name}:${own}` }, "aria-label": `Offer ${own}` });
      box.addEventListener("change", () => this.setTool(name, own, exposed, box.checked, box));
      const [description, cut] = clip(t.description || "", 240);
      return h(
        "li.mcp-tool",
        { dataset: { tool: own } },
        h("label.check", box, " ", h("code", own), exposed !== own ? h("span.muted.exposed", ` as ${exposed}`) : null),
        description ? h("div.muted.tool-description", description + (cut ? "…" : "")) : null,
      );
    });
    const more = of ? h("p.muted.tools-cut", `The first ${tools.length} of ${of} tools: the gateway cut the list to keep its answer small.`) : null;
    const details = h("details.mcp-tools", { open: this.openTools.has(name) }, h("summary", `Tools (${of || tools.length})`), h("ul.mcp-tool-list", items), more);
    details.addEventListener("toggle", () => (details.open ? this.openTools.add(name) : this.openTools.delete(name)));
    return details;
  }

  async test(name, button) {
    const undo = busy(button, "Testing…");
    try {
      const res = await this.gw.call("mcp.test", { name });
      if (res.ok) toast(`${name}: ok, ${res.toolCount ?? 0} tool${res.toolCount === 1 ? "" : "s"}.`, "ok");
      else toast(`${name}: ${res.status || "error"}: ${clip(res.error || "no answer", 300)[0]}`, "error");
    } catch (err) {
      failed(`Test of ${name}`, err);
    } finally {
      undo();
      if (this.alive) await this.loader.refresh();
    }
  }

  async login(name, button) {
    const undo = busy(button);
    let res;
    try {
      // the authorization server sends the browser back to this gateway's HTTP API, where this page comes from
      res = await this.gw.call("mcp.login", { name, redirectUri: `${location.origin}${CALLBACK_PATH}` });
    } catch (err) {
      failed(`Log in to ${name}`, err);
      return;
    } finally {
      undo();
    }
    const url = String(res?.url || "");
    if (!/^https?:\/\//i.test(url) || !safeUrl(url)) {
      toast(`Log in to ${name}: the gateway gave no address to open.`, "error");
      return;
    }
    const until = res.expiresAt ? ` It works until ${formatTime(res.expiresAt)}, once.` : "";
    await dialog(
      `Log in to ${name}`,
      [
        h("p", `Open the server's login page and allow access. The server sends you back to the gateway, which keeps the grant.${until}`),
        h("p", h("a.button.login-link", { href: url, target: "_blank", rel: "noopener noreferrer" }, "Open the login page")),
        h("p.hint", "When you are done, come back here: “Done” checks the server again."),
      ],
      [{ label: "Done", value: true, kind: "primary" }],
    );
    if (!this.alive) return;
    try {
      await this.gw.call("mcp.test", { name });
    } catch {
      // the card shows the state either way
    }
    if (this.alive) await this.loader.refresh();
  }

  async setEnabled(name, on, button) {
    const undo = busy(button);
    try {
      await this.gw.call("config.set", { path: `mcp.servers.${name}.enabled`, value: on });
      toast(`${name} ${on ? "enabled" : "disabled"}.`, "ok");
    } catch (err) {
      failed(on ? "Enable" : "Disable", err);
    } finally {
      undo();
      if (this.alive) await this.loader.refresh();
    }
  }

  async remove(name, button) {
    const sure = await confirmAction(`Remove ${name}?`, `The agent stops being offered ${name}'s tools, and its settings (headers included) are deleted.`, "Remove");
    if (!sure) return;
    const undo = busy(button);
    try {
      await this.gw.call("config.set", { path: `mcp.servers.${name}` });
      toast(`${name} removed.`, "ok");
    } catch (err) {
      failed("Remove", err);
    } finally {
      undo();
      if (this.alive) await this.loader.refresh();
    }
  }

  async setTool(name, tool, exposed, on, box) {
    const conf = this.config[name] || {};
    const tools = switchTool(conf.tools, tool, on, exposed);
    box.disabled = true;
    try {
      await this.gw.call("config.set", { path: `mcp.servers.${name}.tools`, value: tools });
      if (on && !toolAllowed(tools, tool, exposed)) toast(`${tool} stays off: a pattern in ${name}'s deny list matches it (Edit changes it).`, "error");
      else toast(`${tool} is ${on ? "offered to" : "hidden from"} the agent.`, "ok");
    } catch (err) {
      failed(on ? "Offering the tool" : "Hiding the tool", err);
    } finally {
      box.disabled = false;
      if (this.alive) await this.loader.refresh();
    }
  }

  /** The add (name null) or edit dialog; saves the server's whole object. */
  async edit(name) {
    const conf = name ? this.config[name] || {} : {};
    const nameInput = h("input", { name: "name", autocomplete: "off", spellcheck: "false", placeholder: "e.g. docs" });
    const url = h("input", { name: "url", type: "url", autocomplete: "off", spellcheck: "false", value: conf.url || "", placeholder: "https://example.com/mcp" });
    const transport = h("select", { name: "transport" }, h("option", { value: "streamable-http" }, "Streamable HTTP"), h("option", { value: "sse" }, "SSE (older servers)"));
    transport.value = conf.transport || "streamable-http";
    const trust = h("select", { name: "trust" }, h("option", { value: "untrusted" }, "Untrusted: its results taint the run"), h("option", { value: "trusted" }, "Trusted"));
    trust.value = conf.trust || "untrusted";
    const timeout = h("input", { name: "timeoutMs", type: "number", min: String(MIN_TIMEOUT_MS), max: String(MAX_TIMEOUT_MS), value: conf.timeoutMs ?? "", placeholder: "30000" });
    const headerLines = Object.entries(conf.headers && typeof conf.headers === "object" ? conf.headers : {}).map(([k, v]) => `${k}: ${v}`);
    const headers = h("textarea", { name: "headers", rows: "3", spellcheck: "false", placeholder: "Authorization: Bearer …" });
    headers.value = headerLines.join("\n");
    const allow = h("input", { name: "allow", autocomplete: "off", spellcheck: "false", value: (conf.tools?.allow || []).join(", "), placeholder: "every tool" });
    const deny = h("input", { name: "deny", autocomplete: "off", spellcheck: "false", value: (conf.tools?.deny || []).join(", "), placeholder: "none" });
    const enabled = h("input", { type: "checkbox", name: "enabled", checked: conf.enabled ?? true });
    const oauth = h("input", { type: "checkbox", name: "oauth", checked: Boolean(conf.oauth) });
    const scope = h("input", { name: "scope", autocomplete: "off", spellcheck: "false", value: conf.oauth?.scope || "", placeholder: "the server's default" });
    const clientId = h("input", { name: "clientId", autocomplete: "off", spellcheck: "false", value: conf.oauth?.clientId || "", placeholder: "registered by the gateway" });
    const clientSecret = h("input", { name: "clientSecret", type: "password", autocomplete: "new-password", value: conf.oauth?.clientSecret ? MASK : "" });
    const oauthFields = h("div.oauth-fields", field("Scope", scope), field("Client id", clientId, "Only for a server that needs a client registered by hand."), field("Client secret", clientSecret));
    const showOauth = () => {
      oauthFields.hidden = !oauth.checked;
    };
    oauth.addEventListener("change", showOauth);
    showOauth();
    const error = h("p.error", { role: "alert", hidden: true });
    const fail = (text) => {
      error.textContent = text;
      error.hidden = false;
      return false;
    };
    /** @type {any} */
    let saved = null;
    const ok = await dialog(
      name ? `Edit ${name}` : "Add an MCP server",
      [
        name ? null : field("Name", nameInput, "Letters, digits and dashes: its tools are offered as mcp__name__tool."),
        field("URL", url),
        field("Transport", transport),
        field("Trust", trust),
        field("Headers", headers, "One “Name: value” a line, sent on every request. Values are secrets: shown as *** once saved."),
        field("Offer only", allow, "Tool names or patterns with *, separated by commas (empty: every tool)."),
        field("Never offer", deny, "Tool names or patterns with *, separated by commas."),
        field("Timeout (ms)", timeout, `Per call, connecting included: ${MIN_TIMEOUT_MS} to ${MAX_TIMEOUT_MS} (default 30000).`),
        h("label.check", enabled, " Enabled"),
        h("label.check", oauth, " Needs a login (OAuth)"),
        oauthFields,
        error,
      ],
      [
        { label: "Cancel", value: false },
        { label: name ? "Save" : "Add", value: true, kind: "primary" },
      ],
      async () => {
        const id = name || nameInput.value.trim();
        if (!NAME.test(id)) return fail("A name is 1 to 32 letters, digits and dashes.");
        if (!name && this.config[id]) return fail(`A server named ${id} exists: edit it instead.`);
        const address = url.value.trim();
        if (!/^https?:\/\/[^/\s]+/i.test(address)) return fail("The URL is http:// or https://.");
        let headerObject;
        try {
          headerObject = parseHeaders(headers.value);
        } catch (err) {
          return fail(err.message);
        }
        const ms = timeout.value.trim();
        if (ms && !(Number.isInteger(Number(ms)) && Number(ms) >= MIN_TIMEOUT_MS && Number(ms) <= MAX_TIMEOUT_MS)) return fail(`The timeout is a whole number of milliseconds, ${MIN_TIMEOUT_MS} to ${MAX_TIMEOUT_MS}.`);
        const value = { ...conf, url: address, transport: transport.value, trust: trust.value, enabled: enabled.checked };
        delete value.headers;
        delete value.tools;
        delete value.oauth;
        delete value.timeoutMs;
        if (Object.keys(headerObject).length) value.headers = headerObject;
        const tools = {};
        if (patterns(allow.value).length) tools.allow = patterns(allow.value);
        if (patterns(deny.value).length) tools.deny = patterns(deny.value);
        if (Object.keys(tools).length) value.tools = tools;
        if (ms) value.timeoutMs = Number(ms);
        if (oauth.checked) {
          const o = {};
          if (scope.value.trim()) o.scope = scope.value.trim();
          if (clientId.value.trim()) o.clientId = clientId.value.trim();
          if (clientSecret.value.trim()) o.clientSecret = clientSecret.value.trim();
          value.oauth = o;
        }
        try {
          saved = await this.gw.call("config.set", { path: `mcp.servers.${id}`, value });
          saved.name = id;
          return true;
        } catch (err) {
          return fail(`Could not save: ${errorText(err)}`);
        }
      },
    );
    if (!ok || !saved) return;
    toast(saved.warning ? `${saved.name} saved (${saved.warning}).` : `${saved.name} saved.`, saved.warning ? "info" : "ok");
    if (!this.alive) return;
    await this.loader.refresh();
    const card = this.body.querySelector(`[data-server="${CSS.escape(saved.name)}"]`);
    const testButton = card?.querySelector(`[data-key="${CSS.escape(`test:${saved.name}`)}"]`);
    const conf2 = this.config[saved.name] || {};
    if (testButton && conf2.enabled !== false && !conf2.oauth) await this.test(saved.name, testButton);
  }
}

// Nodes: the machines connected in node mode, their tools, host facts and probed binaries, a form to run any of
// their tools by hand (generated from the tool's JSON Schema), and each node's recent log. `#/nodes` lists the
// nodes (and, folded away, the gateway's own gsv__* tools); `#/nodes/<nodeId>` is one node. The gateway sends no
// event when a node comes or goes, so the tool list is asked for again every 15 s while the tab is visible (and when
// the window gets the focus back), and the page is drawn again only when the set of tools changed (a form being
// filled in keeps its focus otherwise).
// Methods: tools.list, skills.status, skills.update (probe again), tool.invoke, logs.get, config.get (timeouts).

import { empty, errorText, failed, field, formatDuration, formatTime, h, header, icon, imageNode, Loader, toast } from "../ui.js";

const NATIVE_PREFIX = "gsv__";
const LOG_LINE_CHOICES = [50, 100, 200, 500, 1000, 5000];
const DEFAULT_TIMEOUTS = { toolMs: 60000, logsMs: 20000 };
const SLACK_MS = 5000; // wait a little longer than the gateway, so its own timeout message is what we show
const PROBE_POLLS = 8;
const PROBE_POLL_MS = 1500;
const WATCH_MS = 15000;
const MULTILINE = /^(content|text|body|data|command|script|code|message|prompt|oldstring|newstring|input|patch|query)$/i;

export default {
  id: "nodes",
  title: "Nodes",
  icon: "nodes",
  mount(container, ctx) {
    const view = new NodesView(container, ctx);
    view.start();
    return { destroy: () => view.destroy(), update: (params) => view.show(params) };
  },
};

class NodesView {
  constructor(container, ctx) {
    this.container = container;
    this.gw = ctx.gw;
    this.config = ctx.config || {};
    this.navigate = ctx.navigate;
    this.nodeId = ctx.params[0] || null;
    this.tools = [];
    this.status = null;
    this.loaded = false;
    this.timeouts = { ...DEFAULT_TIMEOUTS };
    this.panels = new Map(); // built tool forms and log cards, kept across refreshes so typed values survive
    this.loader = new Loader(this.gw, () => this.load(), { everyMs: WATCH_MS, poll: () => this.watch(), onFocus: true });
  }

  get alive() {
    return this.loader.alive;
  }

  start() {
    this.probeButton = h("button", { type: "button", onclick: () => this.probe() }, "Probe binaries");
    this.body = h("div.nodes-body", { "aria-live": "polite", "aria-busy": "true" }, h("p.muted", "Loading nodes…"));
    this.container.append(header("Nodes", this.loader.button, this.probeButton), this.body);
    this.loadTimeouts();
    this.loader.start(); // and again every WATCH_MS while the tab is visible, and when the window gets the focus back
  }

  destroy() {
    this.loader.stop();
  }

  /** Load again when a node came or went (its tools appeared or vanished). */
  async watch() {
    if (this.loading || !this.loaded || this.gw.state !== "open") return; // the loader polls only a visible page
    try {
      const res = await this.gw.call("tools.list", {});
      const names = (list) => list.map((t) => t.name).join("\n");
      if (this.alive && !this.loading && names(res.tools || []) !== names(this.tools)) await this.loader.refresh();
    } catch {
      // the next look, or Refresh, tries again
    }
  }

  show(params) {
    this.nodeId = params[0] || null;
    this.render();
    this.container.scrollTop = 0;
    this.loader.refresh();
  }

  async loadTimeouts() {
    try {
      const res = await this.gw.call("config.get", { path: "timeouts" });
      const t = res && typeof res.value === "object" && res.value ? res.value : {};
      if (Number.isFinite(t.toolMs)) this.timeouts.toolMs = t.toolMs;
      if (Number.isFinite(t.logsMs)) this.timeouts.logsMs = t.logsMs;
    } catch {
      // the defaults are the gateway's defaults
    }
  }

  async load() {
    if (this.loading) return this.loading;
    this.loading = (async () => {
      try {
        const [tools, status] = await Promise.all([this.gw.call("tools.list", {}), this.gw.call("skills.status", {})]);
        if (!this.alive) return;
        this.tools = tools.tools || [];
        this.status = status;
        this.loaded = true;
        this.render();
      } catch (err) {
        if (!this.alive) return;
        failed("Loading the nodes", err);
        if (!this.loaded) this.body.replaceChildren(h("p.error", `Could not load the nodes: ${errorText(err)}`));
      } finally {
        this.loading = null;
        this.body.setAttribute("aria-busy", "false");
      }
    })();
    return this.loading;
  }

  /** Connected nodes, each with its facts and its tools (named without the `{nodeId}__` prefix). */
  nodes() {
    const facts = this.status?.nodes || [];
    const ids = facts.map((f) => f.nodeId);
    for (const t of this.tools) {
      const id = nodeOfTool(t.name, ids);
      if (id && !ids.includes(id)) ids.push(id);
    }
    return ids.map((id) => ({
      id,
      facts: facts.find((f) => f.nodeId === id) || null,
      tools: this.tools.filter((t) => nodeOfTool(t.name, ids) === id).map((t) => ({ ...t, bare: t.name.slice(id.length + 2) })),
    }));
  }

  render() {
    if (!this.loaded) return;
    const nodes = this.nodes();
    if (this.nodeId) {
      const node = nodes.find((n) => n.id === this.nodeId);
      this.body.replaceChildren(...(node ? this.nodePage(node) : this.missingNode()));
    } else {
      this.body.replaceChildren(...this.overview(nodes));
    }
  }

  // --- the list of nodes -------------------------------------------------------------------------------------------

  overview(nodes) {
    const natives = this.tools.filter((t) => t.name.startsWith(NATIVE_PREFIX));
    return [
      nodes.length ? h("div.cards.node-cards", nodes.map((n) => this.nodeCard(n))) : this.connectHelp("No node is connected"),
      natives.length ? nativeTools(natives) : null,
    ];
  }

  nodeCard(node) {
    const f = node.facts;
    return h(
      "article.card.node-card",
      { "aria-label": `Node ${node.id}` },
      h("h2", h("a", { href: nodeHref(node.id) }, node.id)),
      hostBadges(f),
      h("p.node-tools", h("span.muted", `${node.tools.length} tool${node.tools.length === 1 ? "" : "s"}: `), node.tools.map((t) => t.bare).join(", ") || "none"),
      f && f.hostCapabilities?.length ? h("p.hint", f.hostCapabilities.join(" · ")) : null,
      h("a.button.small", { href: nodeHref(node.id) }, "Run tools and read logs"),
    );
  }

  connectHelp(title) {
    const url = this.gw.wsUrl; // the address this page connected to
    // the token in the environment: a command line is visible to every user of the machine
    const command = `${this.config.tokenRequired ? "ORBITAL_TOKEN=<gateway token> " : ""}orbital node --url ${url} --id laptop`;
    return h(
      "section.card.connect-help",
      h("h2", title),
      h("p", "A node is a machine whose tools the agent and you can use. On that machine, with Orbital installed, run:"),
      h("pre.command", h("code", command)),
      h("p.hint", "Replace laptop with the name the node should have. It appears here once it connects: press Refresh."),
    );
  }

  missingNode() {
    return [
      h("p", h("a", { href: "#/nodes" }, "← All nodes")),
      this.connectHelp(`Node ${this.nodeId} is not connected`),
    ];
  }

  // --- one node ----------------------------------------------------------------------------------------------------

  nodePage(node) {
    return [
      h("nav.node-crumbs", { "aria-label": "Breadcrumbs" }, h("a", { href: "#/nodes" }, "Nodes"), " / ", h("span", { "aria-current": "page" }, node.id)),
      this.hostCard(node),
      h("section.node-tools-list", { "aria-label": "Tools" }, h("h2", `Tools (${node.tools.length})`), node.tools.length ? node.tools.map((t) => this.toolPanel(node, t)) : empty("This node offers no tools.")),
      this.logsCard(node),
    ];
  }

  hostCard(node) {
    const f = node.facts;
    const required = this.status?.requiredBins || [];
    if (!f) return h("section.card", h("h2", "Host"), empty("This node has not reported its host facts."));
    return h(
      "section.card.host-card",
      { "aria-label": "Host" },
      h("h2", "Host"),
      h(
        "dl.facts",
        h("dt", "System"),
        h("dd", String(f.hostOs || "unknown")),
        h("dt", "Role"),
        h("dd", String(f.hostRole || "—")),
        h("dt", "Capabilities"),
        h("dd", f.hostCapabilities?.length ? f.hostCapabilities.map((c) => h("span.badge", String(c))) : "none"),
        h("dt", "Binaries"),
        h("dd", binaries(f, required)),
      ),
      f.hostEnv?.length ? h("details.env", h("summary", `Environment variables (${f.hostEnv.length}, names only)`), h("p.env-names", f.hostEnv.join("  "))) : null,
    );
  }

  toolPanel(node, tool) {
    const key = `tool:${tool.name}:${JSON.stringify(tool.inputSchema ?? null)}`;
    if (!this.panels.has(key)) this.panels.set(key, new ToolRunner(this, tool).element);
    return this.panels.get(key);
  }

  logsCard(node) {
    const key = `logs:${node.id}`;
    if (!this.panels.has(key)) this.panels.set(key, new LogViewer(this, node.id).element);
    return this.panels.get(key);
  }

  // --- probing the hosts -------------------------------------------------------------------------------------------

  async probe() {
    this.probeButton.disabled = true;
    try {
      const before = new Map((this.status?.nodes || []).map((n) => [n.nodeId, n.hostBinStatusUpdatedAt || 0]));
      const res = await this.gw.call("skills.update", { force: true });
      if (!this.alive) return;
      this.status = res;
      this.render();
      for (const e of res.errors || []) toast(`Probe: ${typeof e === "string" ? e : JSON.stringify(e)}`, "error");
      if (!res.requiredBins?.length) {
        toast("No skill needs a binary, so there is nothing to probe.");
        return;
      }
      if (!res.updatedNodeCount) {
        toast("No node could be probed (a node needs shell.exec).");
        return;
      }
      toast(`Probing ${res.updatedNodeCount} node${res.updatedNodeCount === 1 ? "" : "s"} for ${res.requiredBins.length} binaries…`);
      await this.awaitProbe(before);
    } catch (err) {
      failed("Probing the nodes", err);
    } finally {
      this.probeButton.disabled = false;
    }
  }

  /** The probes' answers arrive later: look again a few times until every node's bin facts are newer. */
  async awaitProbe(before) {
    for (let i = 0; i < PROBE_POLLS && this.alive; i += 1) {
      await new Promise((r) => setTimeout(r, PROBE_POLL_MS));
      if (!this.alive) return; // left meanwhile: ask nothing more
      const status = await this.gw.call("skills.status", {});
      if (!this.alive) return;
      this.status = status;
      this.render();
      const fresh = status.nodes.every((n) => !n.canProbeBins || (n.hostBinStatusUpdatedAt || 0) > (before.get(n.nodeId) || 0));
      if (fresh) {
        toast("Binaries probed.", "ok");
        return;
      }
    }
    if (this.alive) toast("Some nodes have not answered the probe yet; Refresh later to see their binaries.");
  }
}

// --- a tool's run form --------------------------------------------------------------------------------------------

/** One node tool: its description, a form built from its input schema, and the last run's result. */
class ToolRunner {
  constructor(view, tool) {
    this.view = view;
    this.tool = tool;
    this.fields = [];
    this.element = this.build();
  }

  build() {
    const schema = objectSchema(this.tool.inputSchema);
    const required = new Set(Array.isArray(schema.required) ? schema.required : []);
    const props = schema.properties && typeof schema.properties === "object" ? Object.entries(schema.properties) : [];
    const formId = `run-${this.tool.name.replace(/[^\w-]/g, "_")}`;
    this.fields = props.map(([name, prop]) => schemaField(name, prop || {}, required.has(name), formId));
    if (!props.length && schema.additionalProperties !== false && this.tool.inputSchema?.type !== "object") {
      this.fields.push(rawArgsField(formId));
    }
    this.button = h("button.primary", { type: "submit" }, `Run ${this.tool.bare}`);
    this.state = h("span.run-state.muted", { role: "status" });
    this.result = h("div.tool-result", { "aria-live": "polite" });
    const form = h(
      "form.tool-form",
      { "aria-label": `Run ${this.tool.bare}`, onsubmit: (ev) => this.submit(ev) },
      this.fields.length ? h("div.form-fields", this.fields.map((f) => f.element)) : h("p.hint", "This tool takes no arguments."),
      h("div.row", this.button, this.state),
    );
    form.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
        ev.preventDefault();
        form.requestSubmit();
      }
    });
    this.form = form;
    return h(
      "details.card.tool",
      { dataset: { tool: this.tool.name } },
      h("summary", h("strong.tool-name", this.tool.bare), h("span.tool-summary.muted", firstSentence(this.tool.description))),
      this.tool.description ? h("p.tool-description", String(this.tool.description)) : null,
      form,
      this.result,
    );
  }

  async submit(ev) {
    ev.preventDefault();
    let args;
    try {
      args = collectArgs(this.fields);
    } catch (err) {
      err.control?.focus();
      this.form.reportValidity();
      return;
    }
    if (!this.form.reportValidity()) return;
    this.button.disabled = true;
    this.state.textContent = `Running since ${new Date().toLocaleTimeString()}…`;
    const started = performance.now();
    try {
      const res = await this.view.gw.call("tool.invoke", { tool: this.tool.name, args }, { timeoutMs: this.view.timeouts.toolMs + SLACK_MS });
      this.showResult(res?.result, null, performance.now() - started);
    } catch (err) {
      this.showResult(null, err, performance.now() - started);
    } finally {
      this.button.disabled = false;
      this.state.textContent = "";
    }
  }

  showResult(result, err, ms) {
    const took = h("span.muted", `${formatDuration(ms)} · ${new Date().toLocaleTimeString()}`);
    const head = h("div.result-head", h("h3", "Result"), err ? h("span.badge.error", "failed") : outcomeBadge(result), took);
    const body = err ? h("p.error", { role: "alert" }, errorText(err)) : renderResult(result);
    this.result.replaceChildren(head, body);
  }
}

/** A form control for one schema property; `read()` gives {set, value} or throws (with `control`) when invalid. */
function schemaField(name, prop, required, formId) {
  return { name, ...schemaControl(name, prop, required, formId) };
}

function schemaControl(name, prop, required, formId) {
  const type = schemaType(prop);
  const label = [name, required ? h("span.req", { "aria-hidden": "true" }, " *") : null];
  const hintText = [type === "any" ? null : type, prop.description, prop.default !== undefined ? `default ${JSON.stringify(prop.default)}` : null].filter(Boolean).join(" · ");
  const id = `${formId}-${name.replace(/[^\w-]/g, "_")}`;
  if (Array.isArray(prop.enum)) return enumField(name, prop, required, label, hintText, id);
  if (type === "boolean") return booleanField(prop, required, label, hintText, id);
  if (type === "number" || type === "integer") return numberField(prop, type, required, label, hintText, id);
  if (type === "array" || type === "object") return jsonField(type, required, label, hintText, id);
  return stringField(name, prop, required, label, hintText, id);
}

function stringField(name, prop, required, label, hint, id) {
  const multiline = MULTILINE.test(name) || (prop.maxLength || 0) > 200;
  const attrs = { id, name, required, spellcheck: "false", autocomplete: "off" };
  if (prop.maxLength) attrs.maxlength = prop.maxLength;
  if (prop.minLength) attrs.minlength = prop.minLength;
  const control = multiline ? h("textarea.code", { ...attrs, rows: 3 }) : h("input", { ...attrs, type: "text" });
  if (typeof prop.default === "string") control.placeholder = prop.default;
  const element = field(label, control, hint || null);
  if (multiline) element.classList.add("wide");
  return { element, read: () => (control.value === "" ? { set: false } : { set: true, value: control.value }) };
}

function numberField(prop, type, required, label, hint, id) {
  const control = h("input", { id, type: "number", required, step: type === "integer" ? "1" : "any", inputmode: type === "integer" ? "numeric" : "decimal" });
  if (Number.isFinite(prop.minimum)) control.min = prop.minimum;
  if (Number.isFinite(prop.maximum)) control.max = prop.maximum;
  if (Number.isFinite(prop.default)) control.placeholder = String(prop.default);
  return {
    element: field(label, control, hint || null),
    read: () => (control.value === "" ? { set: false } : { set: true, value: control.valueAsNumber }),
  };
}

function booleanField(prop, required, label, hint, id) {
  const fallback = prop.default === true;
  const control = h("input", { id, type: "checkbox", checked: fallback });
  const element = h("div.field.check-field", h("label.check", { for: id }, control, " ", label), hint ? h("small.hint", hint) : null);
  // sent when required or when it differs from the schema's default, so "not ticked" leaves the tool's own default
  return { element, read: () => (required || control.checked !== fallback ? { set: true, value: control.checked } : { set: false }) };
}

function enumField(name, prop, required, label, hint, id) {
  const control = h("select", { id, name, required });
  if (!required || prop.default === undefined) control.append(h("option", { value: "" }, required ? "Choose…" : "(not set)"));
  prop.enum.forEach((v, i) => control.append(h("option", { value: String(i) }, typeof v === "string" ? v : JSON.stringify(v))));
  const def = prop.enum.findIndex((v) => JSON.stringify(v) === JSON.stringify(prop.default));
  if (def >= 0) control.value = String(def);
  return {
    element: field(label, control, hint || null),
    read: () => (control.value === "" ? { set: false } : { set: true, value: prop.enum[Number(control.value)] }),
  };
}

function jsonField(type, required, label, hint, id) {
  const control = h("textarea.code", { id, rows: 3, required, spellcheck: "false", placeholder: type === "array" ? "[ ]" : "{ }" });
  const check = () => {
    const text = control.value.trim();
    if (!text) {
      control.setCustomValidity("");
      return { set: false };
    }
    let value;
    try {
      value = JSON.parse(text);
    } catch (err) {
      control.setCustomValidity(`Not valid JSON: ${err.message}`);
      throw Object.assign(new Error("invalid"), { control });
    }
    const ok = type === "array" ? Array.isArray(value) : value !== null && typeof value === "object" && !Array.isArray(value);
    if (!ok) {
      control.setCustomValidity(type === "array" ? "Expected a JSON array: [ … ]" : "Expected a JSON object: { … }");
      throw Object.assign(new Error("invalid"), { control });
    }
    control.setCustomValidity("");
    return { set: true, value };
  };
  control.addEventListener("input", () => {
    try {
      check();
    } catch {
      // the control carries the message; it shows on submit
    }
  });
  const element = field(label, control, [`JSON ${type}`, hint].filter(Boolean).join(" · "));
  element.classList.add("wide");
  return { element, read: check };
}

/** For a tool without a schema: all its arguments as one JSON object. */
function rawArgsField(formId) {
  const f = jsonField("object", false, "Arguments", "this tool describes none", `${formId}-args`);
  return { element: f.element, read: () => ({ ...f.read(), raw: true }) };
}

function collectArgs(fields) {
  const args = {};
  let bad = null;
  for (const f of fields) {
    let r;
    try {
      r = f.read();
    } catch (err) {
      bad = bad || err;
      continue;
    }
    if (!r.set) continue;
    if (r.raw) Object.assign(args, r.value);
    else args[f.name] = r.value;
  }
  if (bad) throw bad;
  return args;
}

/** The first type of a schema that is not "null"; enum without a type counts as string. */
function schemaType(prop) {
  const t = Array.isArray(prop.type) ? prop.type.find((x) => x !== "null") : prop.type;
  if (t) return t;
  if (prop.properties) return "object";
  if (prop.items) return "array";
  return prop.enum ? "string" : "any";
}

function objectSchema(schema) {
  return schema && typeof schema === "object" ? schema : {};
}

// --- showing a result -------------------------------------------------------------------------------------------

function outcomeBadge(result) {
  if (result && typeof result === "object" && typeof result.status === "string") {
    const kind = result.status === "completed" ? "ok" : result.status === "running" ? "warn" : "error";
    const code = Number.isInteger(result.exitCode) ? ` · exit ${result.exitCode}` : "";
    return h(`span.badge.${kind}`, `${result.status}${code}`);
  }
  return h("span.badge.ok", "ok");
}

/** A tool's result: text as text, content blocks (text and images) as such, a command's output first, the rest as
 * pretty JSON (and the full JSON of any object, folded). */
function renderResult(result) {
  if (result === null || result === undefined) return h("p.muted", "No result (the tool answered nothing).");
  if (typeof result === "string") return h("pre.output", result);
  if (typeof result !== "object") return h("pre.output", JSON.stringify(result));
  const parts = [];
  const blocks = Array.isArray(result) ? result : Array.isArray(result.content) ? result.content : null;
  if (blocks && blocks.every((b) => b && typeof b === "object" && typeof b.type === "string")) {
    for (const b of blocks) parts.push(renderBlock(b));
  } else if (typeof result.output === "string") {
    parts.push(result.output ? h("pre.output", result.output) : h("p.muted", "(no output)"));
    if (result.truncated) parts.push(h("p.hint", "The output was cut: the full text is on the node."));
  } else if (typeof result.content === "string") {
    parts.push(h("pre.output", result.content));
  } else {
    return h("pre.output.json", JSON.stringify(result, null, 2));
  }
  parts.push(h("details.raw", h("summary", "Full result (JSON)"), h("pre.json", JSON.stringify(result, stripImages, 2))));
  return h("div", parts);
}

function renderBlock(block) {
  if (block.type === "text") return h("pre.output", String(block.text ?? ""));
  if (block.type === "image") return imageNode(block, `Image (${block.mimeType || "unknown type"}) returned by the tool`);
  return h("pre.output.json", JSON.stringify(block, stripImages, 2));
}

function stripImages(key, value) {
  return key === "data" && typeof value === "string" && value.length > 200 ? `(${value.length} characters of base64)` : value;
}

// --- logs -------------------------------------------------------------------------------------------------------

/** A node's recent log lines, with a choice of how many, in a scrollable block. */
class LogViewer {
  constructor(view, nodeId) {
    this.view = view;
    this.nodeId = nodeId;
    this.element = this.build();
    this.load();
  }

  build() {
    this.lines = h("select", { id: `log-lines-${this.nodeId.replace(/[^\w-]/g, "_")}` }, LOG_LINE_CHOICES.map((n) => h("option", { value: String(n) }, String(n))));
    this.lines.value = "100";
    this.lines.addEventListener("change", () => this.load());
    this.button = h("button", { type: "button", onclick: () => this.load() }, icon("refresh"), " Refresh");
    this.note = h("span.hint", { role: "status" });
    this.block = h("pre.log", { tabindex: "0", "aria-label": `Log of ${this.nodeId}` }, h("span.muted", "Loading…"));
    return h(
      "section.card.logs",
      { "aria-label": "Logs" },
      h("div.logs-head", h("h2", "Recent logs"), h("label.check", "Lines ", this.lines), this.button),
      this.block,
      this.note,
    );
  }

  async load() {
    this.button.disabled = true;
    this.lines.disabled = true;
    this.note.textContent = "Loading…";
    try {
      const res = await this.view.gw.call("logs.get", { nodeId: this.nodeId, lines: Number(this.lines.value) }, { timeoutMs: this.view.timeouts.logsMs + SLACK_MS });
      this.show(res);
    } catch (err) {
      this.block.replaceChildren(h("span.error", `Could not read the log: ${errorText(err)}`));
      this.note.textContent = "";
    } finally {
      this.button.disabled = false;
      this.lines.disabled = false;
    }
  }

  show(res) {
    const lines = res.lines || [];
    this.block.replaceChildren(...(lines.length ? lines.map(logLine) : [h("span.muted", "The log is empty.")]));
    this.block.scrollTop = this.block.scrollHeight;
    const cut = res.truncated ? " (older lines left out: they did not fit one message)" : "";
    this.note.textContent = `${lines.length} line${lines.length === 1 ? "" : "s"}, read at ${formatTime(Date.now())}${cut}`;
  }
}

/** A log line: the node writes JSON lines ({ts, level, msg, …}); anything else is shown as it is. */
function logLine(text) {
  let entry = null;
  try {
    entry = JSON.parse(text);
  } catch {
    // plain text
  }
  if (!entry || typeof entry !== "object" || typeof entry.msg !== "string") return h("span.log-line", `${text}\n`);
  const { ts, level, msg, ...rest } = entry;
  const extra = Object.entries(rest).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`).join(" ");
  const lvl = String(level || "").toLowerCase();
  return h(
    `span.log-line${/^(warn|warning)$/.test(lvl) ? ".lvl-warn" : /^(error|critical|fatal)$/.test(lvl) ? ".lvl-error" : ""}`,
    h("span.log-ts", shortTime(ts)),
    " ",
    h("span.log-level", (lvl || "-").padEnd(5)),
    " ",
    msg,
    extra ? h("span.log-extra", ` ${extra}`) : null,
    "\n",
  );
}

function shortTime(ts) {
  const d = new Date(ts);
  return Number.isNaN(d.getTime()) ? String(ts ?? "") : d.toLocaleString([], { month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

// --- small parts ------------------------------------------------------------------------------------------------

function nodeHref(id) {
  return `#/nodes/${encodeURIComponent(id)}`;
}

/** The node a tool belongs to: the longest known node id that prefixes `{id}__`, else what comes before `__`. */
function nodeOfTool(name, ids) {
  if (name.startsWith(NATIVE_PREFIX)) return null;
  const known = ids.filter((id) => name.startsWith(`${id}__`)).sort((a, b) => b.length - a.length)[0];
  if (known) return known;
  const cut = name.indexOf("__");
  return cut > 0 ? name.slice(0, cut) : null;
}

function hostBadges(f) {
  if (!f) return h("p.muted", "No host facts reported.");
  return h(
    "p.row.host-badges",
    h("span.badge", String(f.hostOs || "unknown system")),
    f.hostRole ? h("span.badge", String(f.hostRole)) : null,
    f.hostBins?.length ? h("span.badge.ok", `${f.hostBins.length} binaries found`) : null,
  );
}

function binaries(f, required) {
  const found = new Set(f.hostBins || []);
  const names = [...new Set([...required, ...found])].sort();
  if (!names.length) return h("span.muted", "No skill needs a binary, so none were probed.");
  const probed = f.hostBinStatusUpdatedAt ? `probed ${formatTime(f.hostBinStatusUpdatedAt)}` : "not probed yet";
  return h(
    "span.bins",
    names.map((b) => h(`span.badge.${found.has(b) ? "ok" : f.hostBinStatusUpdatedAt ? "error" : "warn"}`, { title: found.has(b) ? "found" : "not found" }, `${b}${found.has(b) ? "" : " ✗"}`)),
    h("small.hint", ` ${probed}${f.canProbeBins ? "" : " · this node cannot be probed"}`),
  );
}

function nativeTools(tools) {
  return h(
    "details.card.native-tools",
    h("summary", h("strong", `Native tools (${tools.length})`), h("span.muted", " · run by the gateway itself, for the agent")),
    h(
      "div.table-wrap",
      h(
        "table",
        h("thead", h("tr", h("th", "Tool"), h("th", "Arguments"), h("th", "What it does"))),
        h(
          "tbody",
          tools.map((t) => {
            const props = Object.keys(objectSchema(t.inputSchema).properties || {});
            return h("tr", h("td", h("code", String(t.name))), h("td.args", props.join(", ") || "—"), h("td", String(t.description || "")));
          }),
        ),
      ),
    ),
  );
}

function firstSentence(text) {
  const s = String(text || "");
  const cut = s.search(/[.;](\s+(?=[A-Z])|$)/);
  return cut > 0 && cut < 110 ? s.slice(0, cut + 1) : s.length > 110 ? `${s.slice(0, 107)}…` : s;
}

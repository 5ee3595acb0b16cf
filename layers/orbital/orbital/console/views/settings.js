// Settings: the gateway's configuration, read with config.get and written one dotted path at a time with config.set.
// - The model (`model` = {provider, id}): the provider from those the configuration names, the id free text.
// - API keys (`apiKeys.<provider>`): write-only. config.get shows a stored key as "***"; the page only says whether
//   one is set, and a key typed here leaves its input as soon as it is stored.
// - Typed fields for timeouts, token budgets, spend caps (USD), session policies and compaction, each with its
//   current value and default; a refused or invalid value is explained next to its field and the input is kept.
//   Their range, default, choices and hint come from the gateway's schema (`config.schema`, the one config.set
//   checks against); the page only names and groups them.
// - Spend: dollars used, reserved and capped per period and scope, and the top sessions and cron jobs
//   (`spend.status`, the console's spend.js).
// - Backups: the last local backup, its size, the next one and "Back up now"; on AWS what to use instead
//   (`backup.status` / `backup.run`, the console's backup.js).
// - Advanced: any path set to a JSON value, and the whole configuration as read-only JSON (masked by the gateway).
//   The gateway's refusal ("timeouts.toolMs: expected integer ≥ 1000, got …") shows next to the value, and its
//   warning about a key it does not read ("unknown key `modle` — did you mean `model`?") next to the path.
// The forms are drawn once; a reconnect, Refresh or a save reads the configuration again and shows the new values in
// every field the user has not changed (what is typed stays).

import { BackupCard } from "../backup.js";
import { SpendCard } from "../spend.js";
import { busy, clip, confirmAction, debounce, empty, errorText, failed, field, fill, h, header, icon, randomId, rerender, toast } from "../ui.js";

export default {
  id: "settings",
  title: "Settings",
  icon: "settings",
  mount(container, ctx) {
    const view = new SettingsView(container, ctx.gw);
    return () => view.destroy();
  },
};

// --- what the typed sections hold --------------------------------------------------------------------------------

const int = (path, label, opts = {}) => ({ kind: "int", path, label, ...opts });
const choice = (path, label, options, opts = {}) => ({ kind: "select", path, label, options, ...opts });
const text = (path, label, opts = {}) => ({ kind: "text", path, label, ...opts });
const flag = (path, label, opts = {}) => ({ kind: "bool", path, label, ...opts });
const num = (path, label, opts = {}) => ({ kind: "number", path, label, ...opts });

const LIMITS = [
  { heading: "Timeouts" },
  int("timeouts.llmMs", "Model call timeout (ms)"),
  int("timeouts.toolMs", "Tool call timeout (ms)"),
  int("timeouts.logsMs", "Log fetch timeout (ms)"),
  int("agents.maxIterations", "Model calls per run"),
  { heading: "Token budgets" },
  int("budgets.session", "Tokens per session", { optional: true }),
  int("budgets.daily", "Tokens per day", { optional: true }),
  int("budgets.monthly", "Tokens per month", { optional: true }),
  { heading: "Spend caps (USD)" },
  num("spend.limits.session", "Dollars per session", { optional: true }),
  num("spend.limits.daily", "Dollars per day", { optional: true }),
  num("spend.limits.monthly", "Dollars per month", { optional: true }),
  num("spend.alertAt", "Alert at this share of a cap"),
];

const SESSIONS = [
  { heading: "Reset policy of new sessions" },
  choice("session.defaultResetPolicy.mode", "Reset", [
    ["manual", "Manual: never by itself"],
    ["daily", "Daily, at a set hour (UTC)"],
    ["idle", "After a time without activity"],
  ]),
  int("session.defaultResetPolicy.atHour", "Hour of the daily reset (UTC)", { when: ["session.defaultResetPolicy.mode", "daily"] }),
  int("session.defaultResetPolicy.idleMinutes", "Idle minutes before a reset", { when: ["session.defaultResetPolicy.mode", "idle"] }),
  { heading: "Direct messages" },
  choice("session.dmScope", "Session of a direct message", [
    ["main", "The main session, whoever writes"],
    ["per-peer", "One per sender"],
    ["per-channel-peer", "One per sender and channel"],
    ["per-account-channel-peer", "One per sender, channel and account"],
  ]),
  text("session.mainKey", "Main session's key", { required: true, patternText: "One word, without spaces or colons." }),
  text("userTimezone", "Your time zone", { required: true, timezone: true, note: "An IANA name, e.g. Europe/Paris." }),
  { heading: "Compaction" },
  flag("compaction.enabled", "Compact long sessions"),
  int("compaction.reserveTokens", "Tokens kept free for the reply"),
  int("compaction.keepRecentTokens", "Recent tokens kept as they are"),
];

/** Every other setting the schema has a form field for (a number, a switch, a choice or a line of text; not a
 * secret, not under a name of the user's, not on another card), as typed fields labelled by their path and grouped
 * by their section. */
function otherSpecs(schema, shown) {
  const kinds = { int: "int", number: "number", bool: "bool", enum: "select", string: "text" };
  const onCards = (path) => shown.has(path) || /^(model|apiKeys|providers|channels|auth)(\.|$)/.test(path);
  const specs = [];
  let section = null;
  for (const f of schema.values()) {
    if (!kinds[f.kind] || f.secret || f.path.includes("<") || onCards(f.path)) continue;
    const top = f.path.split(".")[0];
    if (top !== section) {
      section = top;
      specs.push({ heading: top });
    }
    const spec = { kind: kinds[f.kind], path: f.path, label: f.path };
    if (f.kind === "enum") spec.options = f.options.map((value) => [value, value]);
    if (f.default === undefined && (f.kind === "int" || f.kind === "number")) Object.assign(spec, { optional: true, unset: "Not set" });
    specs.push(spec);
  }
  return specs;
}

/** A field's spec with what the gateway's schema says of its path: range, default, choices, pattern and hint. A
 * choice the page has no label for is offered by its value. */
function withSchema(specs, schema) {
  return specs.map((spec) => {
    const f = spec.path && schema.get(spec.path);
    if (!f) return spec;
    const merged = { ...spec, hint: [f.description, spec.note].filter(Boolean).join(" ") };
    if (f.min !== undefined) merged.min = f.min;
    if (f.max !== undefined) merged.max = f.max;
    if (f.default !== undefined) merged.def = f.default;
    if (f.pattern) merged.pattern = new RegExp(f.pattern);
    if (spec.kind === "select" && Array.isArray(f.options)) {
      const labels = new Map(spec.options);
      merged.options = f.options.map((value) => [value, labels.get(value) || value]);
    }
    return merged;
  });
}

const BUILT_IN_PROVIDERS = ["anthropic", "openai", "google", "bedrock", "openrouter", "groq", "ollama", "lmstudio", "vllm"];
const PROVIDER_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const PATH_HINT = "Dotted, e.g. channels.discord.dmPolicy.";

// --- small helpers -----------------------------------------------------------------------------------------------

function getPath(obj, path) {
  return path.split(".").reduce((node, key) => (node && typeof node === "object" ? node[key] : undefined), obj);
}

function isObject(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

function card(id, title, ...body) {
  const heading = h("h2", { id: `settings-${id}-title` }, title);
  return h(`section.card.settings-${id}`, { "aria-labelledby": heading.id }, heading, body);
}

/** A field's error line, tied to its control for assistive technology. */
function errorSlot(control) {
  const slot = h("p.field-error.error", { id: `${control.id || (control.id = `s-${randomId()}`)}-error`, role: "alert", hidden: true });
  control.setAttribute("aria-describedby", slot.id);
  return {
    el: slot,
    show(message) {
      slot.textContent = message;
      slot.hidden = false;
      control.setAttribute("aria-invalid", "true");
    },
    clear() {
      slot.textContent = "";
      slot.hidden = true;
      control.removeAttribute("aria-invalid");
    },
  };
}

/** Draw `box` again, keeping the keyboard's place and what was typed in the controls that carry a `data-key`. */
function redraw(box, nodes) {
  const typed = [...box.querySelectorAll("input[data-key], textarea[data-key]")].filter((c) => c.value).map((c) => [c.dataset.key, c.value]);
  rerender(box, nodes);
  for (const [key, value] of typed) {
    const control = box.querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (control) control.value = value;
  }
}

// --- the view ----------------------------------------------------------------------------------------------------

class SettingsView {
  constructor(container, gw) {
    this.gw = gw;
    this.alive = true;
    this.config = null;
    this.rendered = false;
    this.syncs = []; // (config) => void: each card shows new values where the user has not typed
    this.readSeq = 0; // the latest config.get of the whole configuration, and of the Advanced path
    this.pathSeq = 0;
    this.refreshButton = h("button", { type: "button", onclick: () => this.load() }, icon("refresh"), " Refresh");
    this.body = h("div.settings-body", h("p.muted", "Loading…"));
    container.append(header("Settings", this.refreshButton), this.body);
    this.stop = gw.on("status", (s) => {
      if (s.state === "open") this.load();
    });
    this.load();
  }

  destroy() {
    this.alive = false;
    this.stop();
  }

  /** Read the configuration: the first time the forms are drawn, later only their values change (reread). */
  async load() {
    if (this.rendered) return this.reread(true);
    const done = busy(this.refreshButton);
    try {
      const [res, schema] = await Promise.all([
        this.gw.call("config.get", {}),
        this.gw.call("config.schema", {}).catch(() => ({ fields: [] })), // an older gateway: the page's own specs
      ]);
      if (!this.alive) return;
      this.config = res.config || {};
      this.schema = new Map((schema.fields || []).map((f) => [f.path, f]));
      this.render();
    } catch (err) {
      if (this.alive) fill(this.body, h("p.error", { role: "alert" }, `Could not read the configuration: ${errorText(err)}`), h("button", { type: "button", onclick: () => this.load() }, "Try again"));
    } finally {
      done();
    }
  }

  /** Read the configuration again without redrawing the forms: each field the user has not changed shows the new
   * value, what is typed stays. `loud`: say so when it fails (a Refresh). */
  async reread(loud = false) {
    const mine = ++this.readSeq;
    const done = busy(this.refreshButton);
    try {
      const res = await this.gw.call("config.get", {});
      if (!this.alive || mine !== this.readSeq) return;
      this.config = res.config || {};
      fill(this.raw, JSON.stringify(this.config, null, 2));
      for (const sync of this.syncs) sync(this.config);
    } catch (err) {
      if (loud && this.alive) failed("Reading the configuration", err); // the fields keep what they show
    } finally {
      done();
    }
  }

  render() {
    const config = this.config;
    this.rendered = true;
    this.syncs = [];
    this.raw = h("pre.settings-raw", { tabindex: "0", "aria-label": "Configuration as JSON" }, JSON.stringify(config, null, 2));
    const limits = new TypedForm(this, withSchema(LIMITS, this.schema), config);
    const sessions = new TypedForm(this, withSchema(SESSIONS, this.schema), config);
    const shown = new Set([...LIMITS, ...SESSIONS].map((/** @type {any} */ spec) => spec.path).filter(Boolean));
    const others = otherSpecs(this.schema, shown);
    const more = others.length ? new TypedForm(this, withSchema(others, this.schema), config) : null;
    this.syncs.push((c) => limits.sync(c), (c) => sessions.sync(c));
    if (more) this.syncs.push((c) => more.sync(c));
    fill(
      this.body,
      h("div.settings-grid",
        this.modelCard(config),
        this.keysCard(config),
        this.spendCard(),
        this.backupCard(),
        card("limits", "Limits", limits.el),
        card("sessions", "Sessions", sessions.el),
        more ? card("more", "More settings", h("details.settings-more-wrap", h("summary", "Every other setting the gateway reads"), more.el)) : null,
        this.advancedCard(),
      ),
    );
  }

  /** Spend in dollars (spend.status), read again with each read of the configuration. */
  spendCard() {
    const spend = new SpendCard(this.gw);
    spend.load();
    this.syncs.push(() => spend.load());
    return card("spend", "Spend", spend.el);
  }

  /** The local backups (backup.status, the console's backup.js), read again with each read of the configuration. */
  backupCard() {
    const backups = new BackupCard(this.gw);
    backups.load();
    this.syncs.push(() => backups.load());
    return card("backups", "Backups", backups.el);
  }

  /** config.set; resolves with its answer (`warning` when the gateway does not read the key). */
  async set(path, value, remove = false) {
    return this.gw.call("config.set", remove ? { path } : { path, value });
  }

  // --- model ---------------------------------------------------------------------------------------------------

  modelCard(config) {
    let model = {};
    const provider = h("select", { name: "provider" });
    const list = h("datalist", { id: "settings-model-ids" });
    const id = h("input", { name: "modelId", list: list.id, autocomplete: "off", spellcheck: "false", required: true });
    const fillIds = () => fill(list, modelIds(config, provider.value).map((m) => h("option", { value: m })));
    provider.addEventListener("change", fillIds);
    const current = h("p.hint");
    // what the fields show when they are as read (so a new read may replace them)
    let shown = { provider: null, id: null };
    const sync = (c) => {
      config = c;
      model = isObject(c.model) ? { ...c.model } : {};
      fill(current, "Now: ", h("code", `${model.provider || "?"}/${model.id || "?"}`));
      if (shown.provider !== null && (provider.value !== shown.provider || id.value.trim() !== shown.id)) return; // being edited
      const configured = providersOf(c);
      fill(provider,
        h("optgroup", { label: "Configured" }, configured.map((p) => h("option", { value: p }, p))),
        h("optgroup", { label: "Built in" }, BUILT_IN_PROVIDERS.filter((p) => !configured.includes(p)).map((p) => h("option", { value: p }, p))),
      );
      provider.value = String(model.provider || configured[0] || "anthropic");
      id.value = String(model.id || "");
      shown = { provider: provider.value, id: id.value.trim() };
      fillIds();
    };
    sync(config);
    this.syncs.push(sync);
    const error = errorSlot(id);
    const save = h("button.primary", { type: "submit" }, "Save model");
    const form = h("form.settings-form", { novalidate: true },
      h("div.pair-fields", field("Provider", provider, "Providers named in the configuration first."), h("div", field("Model id", id, "Any id the provider knows, e.g. claude-sonnet-4-5."), error.el), list),
      current,
      h("div.row", save),
    );
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      error.clear();
      const value = { ...model, provider: provider.value, id: id.value.trim() };
      if (!value.id) return error.show("Enter the model's id.");
      const done = busy(save);
      try {
        await this.set("model", value);
        model = value;
        shown = { provider: value.provider, id: value.id }; // saved: as read from now on
        fill(current, "Now: ", h("code", `${value.provider}/${value.id}`));
        toast(`Model set to ${value.provider}/${value.id}.`, "ok");
        await this.reread();
      } catch (err) {
        error.show(errorText(err));
      } finally {
        done();
      }
    });
    return card("model", "Model", h("p.hint", "The model every session uses unless it chooses its own."), form);
  }

  // --- API keys ------------------------------------------------------------------------------------------------

  /** The keys card: drawn again (keys(), keeping the focus and anything typed) after each read. */
  keysCard(config) {
    this.keysBox = h("div.keys-body");
    const keys = (c) => redraw(this.keysBox, this.keysContent(c));
    keys(config);
    this.syncs.push(keys);
    return card("keys", "API keys", h("p.hint", "Keys are write-only: the gateway never sends one back, and this page only shows whether one is set."), this.keysBox);
  }

  keysContent(config) {
    const keys = isObject(config.apiKeys) ? config.apiKeys : {};
    const names = providersOf(config);
    const rows = names.map((name) => this.keyRow(name, Boolean(keys[name]), getPath(config, `providers.${name}.baseUrl`)));
    return [rows.length ? h("ul.key-list", rows) : empty("No provider is configured yet."), this.addKeyForm()];
  }

  keyRow(name, isSet, baseUrl) {
    const input = h("input", { type: "password", name: `key-${name}`, autocomplete: "new-password", spellcheck: "false", placeholder: isSet ? "New key" : "Key", dataset: { key: `key-input:${name}` } });
    const error = errorSlot(input);
    const save = h("button.small", { type: "submit", "aria-label": `Save the ${name} key`, dataset: { key: `key-save:${name}` } }, isSet ? "Replace" : "Save");
    const remove = isSet ? h("button.small.danger", { type: "button", "aria-label": `Remove the ${name} key`, dataset: { key: `key-remove:${name}` } }, "Remove") : null;
    const form = h("form.key-form", { novalidate: true },
      h("div.key-head", h("strong", name), " ", isSet ? h("span.badge.ok", "key set ••••") : h("span.badge", "no key"), baseUrl ? h("span.muted.key-url", ` ${baseUrl}`) : null),
      h("div.key-edit", field(isSet ? `Replace the ${name} key` : `Set the ${name} key`, input), h("div.row", save, remove)),
      error.el,
    );
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      error.clear();
      const key = input.value.trim();
      if (!key) return error.show("Paste the key first.");
      await this.keyChange(name, key, [save, remove], error, [input]);
    });
    remove?.addEventListener("click", async () => {
      if (!(await confirmAction(`Remove the ${name} key?`, `Calls to ${name} fail until a key is set again (unless the gateway's environment has one).`, "Remove"))) return;
      remove.focus(); // back from the question
      error.clear();
      await this.keyChange(name, null, [save, remove], error, [input]);
    });
    return h("li.key", { dataset: { provider: name } }, form);
  }

  /** Store (or, with `key` null, remove) a provider's key, then read the configuration again, which redraws the
   * keys: the inputs in `clear` never keep a key, and the keyboard stays on the provider's row. */
  async keyChange(name, key, buttons, error, clear) {
    const focused = this.keysBox.contains(document.activeElement);
    const done = buttons.filter(Boolean).map((b) => busy(b));
    try {
      await this.set(`apiKeys.${name}`, key, key === null);
      for (const input of clear) input.value = "";
      toast(key === null ? `The ${name} key is removed.` : `The ${name} key is stored.`, "ok");
      await this.reread();
    } catch (err) {
      error.show(errorText(err));
    } finally {
      for (const undo of done) undo();
    }
    // the button pressed may be gone (Remove, once there is no key): the row's input, else the form to add one
    if (focused && this.alive && !this.keysBox.contains(document.activeElement)) {
      const row = this.keysBox.querySelector(`[data-key="${CSS.escape(`key-input:${name}`)}"]`);
      (row || this.keysBox.querySelector('[data-key="add-name"]'))?.focus();
    }
  }

  addKeyForm() {
    const name = h("input", { name: "provider", autocomplete: "off", spellcheck: "false", placeholder: "e.g. openrouter", list: "settings-provider-names", dataset: { key: "add-name" } });
    const key = h("input", { type: "password", name: "key", autocomplete: "new-password", spellcheck: "false", dataset: { key: "add-key" } });
    const error = errorSlot(key);
    const add = h("button", { type: "submit", dataset: { key: "add" } }, "Add key");
    const names = h("datalist", { id: "settings-provider-names" }, BUILT_IN_PROVIDERS.map((p) => h("option", { value: p })));
    const form = h("form.add-key", { novalidate: true },
      h("h3", "Another provider"),
      h("div.pair-fields", field("Provider name", name), field("Its API key", key)),
      names,
      error.el,
      h("div.row", add),
    );
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      error.clear();
      const provider = name.value.trim();
      if (!PROVIDER_NAME.test(provider)) return error.show("A provider name holds only letters, digits, _ and - (e.g. openrouter).");
      if (!key.value.trim()) return error.show("Paste the key first.");
      await this.keyChange(provider, key.value.trim(), [add], error, [key, name]);
    });
    return form;
  }

  // --- advanced ------------------------------------------------------------------------------------------------

  /** Under the path field: what is stored there now (masked by the gateway). */
  async showCurrent(p, hint) {
    const mine = ++this.pathSeq; // an answer about a path typed before must not replace this one's
    if (!this.alive) return;
    if (!p || p.split(".").some((seg) => !seg)) {
      hint.textContent = PATH_HINT;
      return;
    }
    try {
      const res = await this.gw.call("config.get", { path: p });
      if (mine !== this.pathSeq) return;
      const [shown, cut] = clip(JSON.stringify(res.value), 200);
      hint.textContent = "value" in res ? `Now: ${shown}${cut ? "…" : ""}` : "Not set.";
    } catch {
      if (mine === this.pathSeq) hint.textContent = PATH_HINT;
    }
  }

  advancedCard() {
    const path = h("input", { name: "path", autocomplete: "off", spellcheck: "false", placeholder: "channels.telegram.publicBaseUrl" });
    const value = h("textarea.code", { name: "value", rows: 3, spellcheck: "false", placeholder: '"https://bot.example.org"' });
    const error = errorSlot(value);
    const warning = h("p.field-warning", { role: "status", hidden: true });
    const save = h("button.primary", { type: "submit" }, "Set");
    const remove = h("button.danger", { type: "button" }, "Delete path");
    const now = h("span", PATH_HINT);
    const form = h("form.settings-form", { novalidate: true },
      field("Path", path, now),
      warning,
      field("Value (JSON)", value, 'A JSON value: "text" in quotes, 42, true, ["a"], {"k": 1}.'),
      error.el,
      h("div.row", save, remove),
    );
    path.addEventListener("input", debounce(() => this.showCurrent(path.value.trim(), now), 400));
    const run = async (deleting) => {
      error.clear();
      warning.hidden = true;
      const p = path.value.trim();
      if (!p) return error.show("Enter a path.");
      let parsed;
      if (!deleting) {
        try {
          parsed = JSON.parse(value.value);
        } catch {
          return error.show('Not JSON: put text in double quotes ("like this").');
        }
      } else if (!(await confirmAction(`Delete ${p}?`, "The setting goes back to its default (or away, if it has none).", "Delete"))) {
        return;
      }
      if (deleting) remove.focus(); // back from the question
      const done = [busy(save), busy(remove)];
      try {
        const res = await this.set(p, parsed, deleting);
        value.value = ""; // it may have been a secret
        if (res && res.warning) {
          warning.textContent = `Stored, but: ${res.warning}`;
          warning.hidden = false;
        }
        toast(deleting ? `${p} deleted.` : `${p} set.`, "ok");
        this.showCurrent(p, now);
        await this.reread(); // the other cards show it, unless they are being edited
      } catch (err) {
        error.show(errorText(err));
      } finally {
        for (const undo of done) undo();
      }
    };
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      run(false);
    });
    remove.addEventListener("click", () => run(true));
    return card(
      "advanced",
      "Advanced",
      h("p.hint", "Set any configuration path. The gateway checks the keys it reads (docs/configuration.md) and stores keys it does not read with a warning; secrets are shown masked everywhere."),
      form,
      h("details.settings-raw-wrap", h("summary", "Whole configuration (read-only JSON)"), this.raw),
    );
  }
}

/** The providers the configuration names: the model's, `providers.<name>`, `apiKeys.<name>`; each once. */
function providersOf(config) {
  const names = [];
  if (isObject(config.model) && config.model.provider) names.push(String(config.model.provider));
  if (isObject(config.providers)) names.push(...Object.keys(config.providers));
  if (isObject(config.apiKeys)) names.push(...Object.keys(config.apiKeys));
  return [...new Set(names)];
}

/** Model ids to suggest for a provider: `providers.<name>.models` and the current model's. */
function modelIds(config, provider) {
  const listed = getPath(config, `providers.${provider}.models`);
  const ids = Array.isArray(listed) ? listed.map((m) => (isObject(m) ? m.id : m)).filter((m) => typeof m === "string") : [];
  if (isObject(config.model) && config.model.provider === provider && config.model.id) ids.unshift(config.model.id);
  return [...new Set(ids)];
}

// --- typed forms -------------------------------------------------------------------------------------------------

/** A form of typed fields; Save writes each changed one with config.set and shows each refusal beside its field. */
class TypedForm {
  constructor(view, specs, config) {
    this.view = view;
    this.fields = [];
    const parts = specs.map((spec) => {
      if (spec.heading) return h("h3", spec.heading);
      const f = new TypedField(spec, getPath(config, spec.path));
      this.fields.push(f);
      return f.el;
    });
    this.save = h("button.primary", { type: "submit" }, "Save");
    this.el = h("form.settings-form.typed", { novalidate: true }, parts, h("div.row", this.save));
    this.el.addEventListener("input", () => this.applyConditions());
    this.el.addEventListener("change", () => this.applyConditions());
    this.el.addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.submit();
    });
    this.applyConditions();
  }

  /** Show a new read of the configuration in the fields the user has not changed. */
  sync(config) {
    for (const f of this.fields) f.sync(getPath(config, f.spec.path));
    this.applyConditions();
  }

  applyConditions() {
    for (const f of this.fields) {
      if (!f.spec.when) continue;
      const [path, wanted] = f.spec.when;
      const other = this.fields.find((o) => o.spec.path === path);
      f.el.hidden = other ? other.control.value !== wanted : false;
    }
  }

  async submit() {
    const changes = [];
    let invalid = false;
    for (const f of this.fields) {
      f.error.clear();
      if (f.el.hidden) continue;
      const change = f.read();
      if (change.error) {
        f.error.show(change.error);
        invalid = true;
      } else if (change.changed) {
        changes.push([f, change]);
      }
    }
    if (invalid) return;
    if (!changes.length) return toast("Nothing to save: no field was changed.");
    const done = busy(this.save);
    let saved = 0;
    for (const [f, change] of changes) {
      try {
        await this.view.set(f.spec.path, change.value, change.remove);
        f.saved(change);
        saved += 1;
      } catch (err) {
        f.error.show(errorText(err)); // the input keeps what the user typed
      }
    }
    done();
    const what = changes.filter(([f]) => !f.error.el.textContent).map(([f, c]) => `${f.spec.label}${c.remove ? (f.spec.optional ? ` (${(f.spec.unset || "no limit").toLowerCase()})` : " (default)") : ""}`);
    if (saved === changes.length) toast(`Saved: ${what.join(", ")}.`, "ok");
    else failed("Saving", { message: `${changes.length - saved} of ${changes.length} settings were refused: see the fields.` });
    if (saved) await this.view.reread();
  }
}

class TypedField {
  constructor(spec, current) {
    this.spec = spec;
    this.setCurrent(current);
    this.zones = spec.timezone ? timezoneList() : null;
    this.control = this.makeControl();
    this.error = errorSlot(this.control);
    const hint = [spec.hint, defaultText(spec)].filter(Boolean).join(" ");
    this.el =
      spec.kind === "bool"
        ? h("div.field.check-field", h("label.check", this.control, " ", spec.label), hint ? h("small.hint", hint) : null, this.error.el)
        : h("div.typed-field", field(spec.label, this.control, hint || null), this.error.el, this.zones);
    this.show(current);
  }

  /** What is stored: what the field shows when nothing is set is the default for a select or a switch, empty else. */
  setCurrent(value) {
    const { kind, def } = this.spec;
    this.current = (value === undefined || value === null) && (kind === "select" || kind === "bool") ? def : value;
  }

  /** A new read: shown unless the field holds a change of the user's (or something invalid they are fixing). */
  sync(value) {
    const now = this.read();
    if (now.error || now.changed) return;
    this.setCurrent(value);
    this.show(value);
  }

  makeControl() {
    const { kind, options, min, max, def, optional } = this.spec;
    if (kind === "select") {
      const known = options.map(([value, label]) => h("option", { value }, label));
      return h("select", { name: this.spec.path }, known);
    }
    if (kind === "bool") return h("input", { type: "checkbox", name: this.spec.path });
    if (kind === "int" || kind === "number") {
      const step = kind === "int" ? 1 : "any";
      return h("input", { type: "number", name: this.spec.path, inputmode: kind === "int" ? "numeric" : "decimal", step, min, max, placeholder: optional ? this.spec.unset || "No limit" : def !== undefined ? `${def} (default)` : null });
    }
    return h("input", { name: this.spec.path, autocomplete: "off", spellcheck: "false", list: this.zones ? this.zones.id : null });
  }

  show(value) {
    const { kind, def } = this.spec;
    if (kind === "bool") this.control.checked = value === undefined ? Boolean(def) : value === true;
    else if (kind === "select") {
      const shown = value === undefined || value === null ? def : String(value);
      if (![...this.control.options].some((o) => o.value === shown)) this.control.append(h("option", { value: shown }, `${shown} (set elsewhere)`));
      this.control.value = shown;
    } else this.control.value = value === undefined || value === null ? "" : String(value);
  }

  /** What Save should do with this field: `{changed, value | remove}` or `{error}`. */
  read() {
    const { kind } = this.spec;
    if (kind === "bool") return this.changeTo(this.control.checked);
    if (kind === "select") return this.changeTo(this.control.value);
    if (kind === "int" || kind === "number") return this.readInt();
    return this.readText();
  }

  changeTo(value) {
    return value === this.current ? { changed: false } : { changed: true, value };
  }

  readInt() {
    const { min, max, kind } = this.spec;
    const whole = kind === "int";
    const raw = this.control.value.trim();
    if (this.control.validity.badInput) return { error: whole ? "Enter a whole number." : "Enter a number." };
    if (raw === "") return this.current === undefined || this.current === null ? { changed: false } : { changed: true, remove: true };
    const n = Number(raw);
    if (whole ? !Number.isInteger(n) : !Number.isFinite(n)) return { error: whole ? "Enter a whole number." : "Enter a number." };
    if (min !== undefined && n < min) return { error: `At least ${min}.` };
    if (max !== undefined && n > max) return { error: `At most ${max}.` };
    return this.changeTo(n);
  }

  readText() {
    const { required, pattern, patternText, timezone } = this.spec;
    const value = this.control.value.trim();
    if (!value) return required ? { error: "This cannot be empty." } : this.current ? { changed: true, remove: true } : { changed: false };
    if (pattern && !pattern.test(value)) return { error: patternText };
    if (timezone && !validZone(value)) return { error: `${value} is not a time zone this browser knows (e.g. Europe/Paris).` };
    return this.changeTo(value);
  }

  saved(change) {
    this.current = change.remove ? undefined : change.value;
    if (change.remove && this.spec.def !== undefined) {
      this.current = this.spec.def; // the default applies again
      this.show(this.current);
    }
  }
}

function defaultText({ def, kind, optional }) {
  if (optional) return null;
  if (def === undefined) return null;
  if (kind === "bool") return `Default: ${def ? "on" : "off"}.`;
  if (kind === "select") return null;
  return `Default: ${typeof def === "number" ? def.toLocaleString() : def}.`;
}

function validZone(name) {
  try {
    new Intl.DateTimeFormat("en", { timeZone: name });
    return true;
  } catch {
    return false;
  }
}

/** Time zone names to suggest (the browser's list). */
function timezoneList() {
  const names = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
  return h("datalist", { id: `s-zones-${randomId()}` }, [...new Set(["UTC", ...names])].map((z) => h("option", { value: z })));
}

// Devices: the machines and bridges that hold a token of their own (a node, a client, a channel bridge), each with
// its role, what it is bound to, when it was last seen and when it expires; a device is revoked after a confirmation
// (the gateway refuses its token from then on and closes its open connections).
// "Add device" makes a one-time pairing code (8 characters, 10 minutes, single use) and shows it once, with a
// countdown and the command to run on the new machine (`orbital node --pair CODE` or `orbital login --pair CODE`),
// which trades the code for a token of that machine's own: no secret is copied from this page.
// Methods: device.token.list, device.pair.create, device.token.revoke (an admin's: the view says so to anyone else).

import { busy, confirmAction, dialog, empty, errorText, failed, field, formatTime, h, header, icon, Loader, toast } from "../ui.js";

const ROLES = [
  ["node", "Node: runs tools on its machine"],
  ["client", "Client: chat, sessions, approvals of its own sessions"],
  ["operator", "Operator: everything but tokens and secret values"],
  ["viewer", "Viewer: read only"],
  ["channel", "Channel: a messenger bridge"],
];
const NODE_ID = /^[A-Za-z0-9._-]{1,64}$/;
const DEFAULT_WS = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`;

export default {
  id: "devices",
  title: "Devices",
  icon: "devices",
  mount(container, ctx) {
    const view = new DevicesView(container, ctx);
    return () => view.destroy();
  },
};

/** What a token is bound to, in words. */
export function bindingText(binding) {
  if (!binding || typeof binding !== "object") return "—";
  if (binding.nodeId) return `node ${binding.nodeId}`;
  if (binding.channel) return `${binding.channel} / ${binding.accountId || "any account"}`;
  const keys = Object.keys(binding);
  return keys.length ? keys.map((k) => `${k} ${binding[k]}`).join(", ") : "—";
}

/** The command the new machine runs, as one line to copy. */
export function pairCommand(role, code, wsUrl, { nodeId = null, httpBase = null } = {}) {
  const words = ["orbital", role === "node" ? "node" : "login", "--pair", code, "--url", wsUrl];
  const wsHost = new URL(wsUrl).host;
  if (httpBase && new URL(httpBase).host !== wsHost) words.push("--http-url", httpBase);
  if (role === "node" && nodeId) words.push("--id", nodeId);
  return words.map((w) => (/^[A-Za-z0-9_./:=@%+-]+$/.test(w) ? w : `'${w.replace(/'/g, "'\\''")}'`)).join(" ");
}

function left(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}

class DevicesView {
  constructor(container, ctx) {
    this.gw = ctx.gw;
    this.wsUrl = ctx.gw.wsUrl || DEFAULT_WS;
    this.loader = new Loader(this.gw, () => this.load());
    this.addButton = h("button.primary", { type: "button", onclick: () => this.add() }, icon("plus"), " Add device");
    this.body = h("div.devices-body", { "aria-live": "polite" }, h("p.muted", "Loading…"));
    container.append(
      header("Devices", this.loader.button, this.addButton),
      h(
        "section.card.devices-list",
        { "aria-labelledby": "devices-list-title" },
        h("h2", { id: "devices-list-title" }, "Device tokens"),
        h("p.hint", "Each device holds a token of its own, with only the rights of its role. Revoking one cuts that device off at once and leaves the others alone."),
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
    let tokens;
    try {
      tokens = (await this.gw.call("device.token.list", {})).tokens || [];
    } catch (err) {
      if (this.alive) this.body.replaceChildren(h("p.error", { role: "alert" }, `Could not read the devices: ${errorText(err)}`));
      return;
    }
    if (!this.alive) return;
    tokens.sort((a, b) => Number(Boolean(a.revoked)) - Number(Boolean(b.revoked)) || (b.createdAt || 0) - (a.createdAt || 0));
    if (!tokens.length) {
      this.body.replaceChildren(empty("No devices yet. “Add device” pairs a node or a client with a token of its own."));
      return;
    }
    const rows = tokens.map((t) => this.row(t));
    this.body.replaceChildren(
      h(
        "div.table-wrap",
        h(
          "table.devices",
          h("thead", h("tr", ["Name", "Role", "Bound to", "Last seen", "Expires", ""].map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", rows),
        ),
      ),
    );
  }

  row(t) {
    const name = String(t.name || t.tokenId);
    const revoke = t.revoked
      ? h("span.badge", "revoked")
      : h("button.danger.small", { type: "button", dataset: { key: `revoke:${t.tokenId}` }, "aria-label": `Revoke ${name}` }, "Revoke");
    if (!t.revoked) revoke.addEventListener("click", () => this.revoke(t, name, revoke));
    return h(
      "tr",
      { dataset: { token: t.tokenId }, class: t.revoked ? "revoked" : "" },
      h("td", { "data-label": "Name" }, h("div", h("strong", name), h("div.muted.token-id", String(t.tokenId)))),
      h("td", { "data-label": "Role" }, h("div", h("span.badge.role", String(t.role || "?")))),
      h("td", { "data-label": "Bound to" }, bindingText(t.binding)),
      h("td.last-seen", { "data-label": "Last seen" }, t.lastUsedAt ? formatTime(t.lastUsedAt) : "never"),
      h("td", { "data-label": "Expires" }, t.expiresAt ? formatTime(t.expiresAt) : "never"),
      h("td.actions", revoke),
    );
  }

  async revoke(t, name, button) {
    const sure = await confirmAction(`Revoke ${name}?`, `The gateway will refuse this ${t.role} token from now on and close the connections that use it. The device needs a new pairing to come back.`, "Revoke");
    if (!sure) return;
    const undo = busy(button);
    try {
      const res = await this.gw.call("device.token.revoke", { tokenId: t.tokenId });
      const closed = typeof res.closed === "number" ? ` (${res.closed} connection${res.closed === 1 ? "" : "s"} closed)` : "";
      toast(`${name} revoked${closed}.`, "ok");
    } catch (err) {
      failed("Revoke", err);
    } finally {
      undo();
      if (this.alive) await this.loader.refresh();
    }
  }

  async add() {
    const role = h("select", { name: "role" }, ROLES.map(([value, label]) => h("option", { value }, label)));
    const name = h("input", { name: "name", autocomplete: "off", spellcheck: "false", placeholder: "e.g. laptop, build box" });
    const nodeId = h("input", { name: "nodeId", autocomplete: "off", spellcheck: "false", placeholder: "any node id" });
    const channel = h("input", { name: "channel", autocomplete: "off", spellcheck: "false", value: "telegram" });
    const account = h("input", { name: "accountId", autocomplete: "off", spellcheck: "false", placeholder: "any account" });
    const error = h("p.error", { role: "alert", hidden: true });
    const nodeField = field("Node id", nodeId, "Only this node id may connect with the token (optional).");
    const channelFields = h("div", field("Channel", channel), field("Account", account, "Optional: one account of the channel."));
    const show = () => {
      nodeField.hidden = role.value !== "node";
      channelFields.hidden = role.value !== "channel";
    };
    role.addEventListener("change", show);
    show();
    let made = null;
    const params = () => {
      const p = { role: role.value };
      if (name.value.trim()) p.name = name.value.trim();
      if (role.value === "node" && nodeId.value.trim()) p.nodeId = nodeId.value.trim();
      if (role.value === "channel") {
        p.channel = channel.value.trim();
        if (account.value.trim()) p.accountId = account.value.trim();
      }
      return p;
    };
    const ok = await dialog(
      "Add a device",
      [h("p", "The device gets a token of its own through a one-time code, valid for 10 minutes."), field("Role", role), field("Name", name), nodeField, channelFields, error],
      [
        { label: "Cancel", value: false },
        { label: "Make a pairing code", value: true, kind: "primary" },
      ],
      async () => {
        const p = params();
        const problem = p.nodeId && !NODE_ID.test(p.nodeId) ? "A node id is letters, digits, dots, dashes and underscores." : p.role === "channel" && !p.channel ? "Name the channel." : null;
        if (problem) {
          error.textContent = problem;
          error.hidden = false;
          return false;
        }
        try {
          made = await this.gw.call("device.pair.create", p);
          made.params = p;
          return true;
        } catch (err) {
          error.textContent = `Could not make a code: ${errorText(err)}`;
          error.hidden = false;
          return false;
        }
      },
    );
    if (!ok || !made) return;
    await this.showCode(made);
    if (this.alive) this.loader.refresh();
  }

  /** The code, once: with a countdown to its expiry and the command to run; closing the dialog forgets it. */
  async showCode(made) {
    const { code, expiresAt, params } = made;
    const command = pairCommand(params.role, code, this.wsUrl, { nodeId: params.nodeId, httpBase: location.origin });
    const countdown = h("span.countdown", { role: "timer", "aria-live": "off" });
    const codeBox = h("code.pair-code", code);
    const commandBox = h("pre.pair-command", h("code", command));
    const copy = h("button.small", { type: "button" }, "Copy command");
    copy.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(command);
        toast("Command copied.", "ok");
      } catch {
        toast("Select the command and copy it by hand.", "info");
      }
    });
    const tick = () => {
      const ms = Number(expiresAt) - Date.now();
      if (ms > 0) {
        countdown.textContent = `valid for ${left(ms)}, one use`;
        return;
      }
      clearInterval(timer);
      countdown.textContent = "expired: make a new one";
      codeBox.textContent = "expired";
      commandBox.replaceChildren(h("code", "—"));
      copy.disabled = true;
    };
    const timer = setInterval(tick, 1000);
    tick();
    await dialog(
      "Pairing code",
      [
        h("p.pair-code-line", codeBox, " ", countdown),
        h("p", params.role === "node" ? "On the new machine, run this to pair it and start it as a node:" : "On the new machine, run this to pair it:"),
        commandBox,
        h("div.row", copy),
        h("p.hint", "The code is shown only now. It is traded for a token that stays on that machine (in its config directory, readable by its user only)."),
      ],
      [{ label: "Done", value: true, kind: "primary" }],
    );
    clearInterval(timer);
  }
}

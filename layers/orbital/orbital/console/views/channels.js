// Channels: who may reach the agent through a messenger, and the messenger accounts themselves.
// - Pairing requests from unknown senders (pair.list), approved or denied (pair.approve / pair.reject).
// - Channel accounts and their status (channels.list, channel.status per channel), started or stopped
//   (channel.start / channel.stop).
// - The Telegram bot setup `orbital channel telegram setup` does: the bot token stored with config.set
//   (channels.telegram.accounts.<id>.botToken, write-only), then channel.start {channel: "telegram", accountId,
//   config: {webhookUrl?}}; its status (channel.status) and removal (channel.stop).
// The pairing list is read again every 20 s while the tab is visible (the gateway sends no event for new requests).

import { busy, clip, confirmAction, empty, errorText, failed, field, fill, formatTime, h, header, Loader, rerender, toast } from "../ui.js";

const CONTROL_TIMEOUT_MS = 40000; // a socket channel has 30 s to answer a control call
const POLL_MS = 20000;
const ACCOUNT_ID = /^[A-Za-z0-9_-]{1,64}$/;

export default {
  id: "channels",
  title: "Channels",
  icon: "channels",
  mount(container, ctx) {
    const view = new ChannelsView(container, ctx.gw);
    return () => view.destroy();
  },
};

class ChannelsView {
  constructor(container, gw) {
    this.gw = gw;
    this.loader = new Loader(gw, () => this.refresh(), { everyMs: POLL_MS, poll: () => this.loadPairs(true) });
    this.lastPairs = null;
    this.knownChannels = new Set(["telegram"]);
    this.pairsBody = h("div.pairs-body", { "aria-live": "polite" }, h("p.muted", "Loading…"));
    this.pairsCount = h("span.badge", "…");
    this.accountsBody = h("div.accounts-body", h("p.muted", "Loading…"));
    this.telegram = new TelegramSetup(gw, () => this.loadAccounts());
    container.append(
      header("Channels", this.loader.button),
      section("Pairing requests", "pairs", [this.pairsCount], [
        h("p.hint", "Unknown senders on a channel whose DM policy is “pairing” wait here until you approve them."),
        this.pairsBody,
      ]),
      section("Accounts", "accounts", [], [this.accountsBody]),
      this.telegram.element,
    );
    this.loader.start();
  }

  get alive() {
    return this.loader.alive;
  }

  destroy() {
    this.loader.stop();
  }

  async refresh() {
    await Promise.all([this.loadPairs(false), this.loadAccounts(), this.telegram.load()]);
  }

  // --- pairing ---------------------------------------------------------------------------------------------------

  async loadPairs(quiet) {
    let pairs;
    try {
      pairs = Object.values((await this.gw.call("pair.list", {})).pairs || {});
    } catch (err) {
      if (!quiet && this.alive) fill(this.pairsBody, h("p.error", { role: "alert" }, `Could not read the pairing requests: ${errorText(err)}`));
      return;
    }
    if (!this.alive) return;
    pairs.sort((a, b) => (a.requestedAt || 0) - (b.requestedAt || 0));
    const key = JSON.stringify(pairs);
    if (quiet && key === this.lastPairs) return; // unchanged: leave the list (and any focus in it) alone
    this.lastPairs = key;
    this.pairsCount.textContent = String(pairs.length);
    this.pairsCount.classList.toggle("warn", pairs.length > 0);
    this.pairsCount.setAttribute("aria-label", `${pairs.length} pending`);
    rerender(this.pairsBody, pairs.length ? h("ul.pair-list", pairs.map((p) => this.pairItem(p))) : empty("No one is waiting for approval."));
  }

  /** After a request was decided (and left the list): the keyboard goes on with the request now in its place, the
   * one before it, or the section's heading when none is left. */
  focusPairAfter(index) {
    if (this.pairsBody.contains(document.activeElement)) return;
    const buttons = [...this.pairsBody.querySelectorAll("li.pair .pair-actions button:first-child")];
    const next = buttons[Math.min(index, buttons.length - 1)];
    if (next) return next.focus();
    const heading = document.getElementById("channels-pairs-title");
    heading?.setAttribute("tabindex", "-1");
    heading?.focus();
  }

  pairItem(pair) {
    const who = pair.senderName ? `${pair.senderName} (${pair.senderId})` : pair.senderId;
    const [text, cut] = clip(pair.firstMessage || "", 280);
    const id = `${pair.channel}:${pair.senderId}`;
    const approve = h("button.primary.small", { type: "button", dataset: { key: `approve:${id}` }, "aria-label": `Approve ${who} on ${pair.channel}` }, "Approve");
    const deny = h("button.danger.small", { type: "button", dataset: { key: `deny:${id}` }, "aria-label": `Deny ${who} on ${pair.channel}` }, "Deny");
    const item = h(
      "li.pair",
      { dataset: { channel: pair.channel, sender: pair.senderId } },
      h("div.pair-who", h("strong", String(pair.senderName || pair.senderId)), pair.senderName ? h("span.muted", ` ${pair.senderId}`) : null, " ", h("span.badge", String(pair.channel))),
      h("div.pair-when.muted", `Asked ${formatTime(pair.requestedAt)}`),
      text ? h("blockquote.pair-message", text, cut ? "…" : "") : h("p.muted.pair-message", "(no text)"),
      h("div.row.pair-actions", approve, deny),
    );
    const decide = async (method, message) => {
      const focused = item.contains(document.activeElement);
      const index = [...item.parentNode.children].indexOf(item);
      const done = [busy(approve), busy(deny)];
      try {
        await this.gw.call(method, { channel: pair.channel, senderId: pair.senderId });
        toast(message, "ok");
      } catch (err) {
        failed(method === "pair.approve" ? "Approve" : "Deny", err);
      } finally {
        if (this.alive) await this.loadPairs(false);
        for (const undo of done) undo(); // the focus goes back to this request's button if it is still listed
        if (focused && this.alive) this.focusPairAfter(index);
      }
    };
    approve.addEventListener("click", () => decide("pair.approve", `${who} may now talk to the agent on ${pair.channel}.`));
    deny.addEventListener("click", () => decide("pair.reject", `Request from ${who} denied.`));
    return item;
  }

  // --- accounts --------------------------------------------------------------------------------------------------

  async loadAccounts() {
    let listed;
    try {
      listed = (await this.gw.call("channels.list", {})).channels || [];
    } catch (err) {
      if (this.alive) fill(this.accountsBody, h("p.error", { role: "alert" }, `Could not read the channels: ${errorText(err)}`));
      return;
    }
    // channels seen before stay asked: a stopped account leaves the registry while its bridge may still be connected
    for (const c of listed) this.knownChannels.add(c.channel);
    const names = [...this.knownChannels];
    const statuses = await Promise.all(
      names.map((channel) =>
        this.gw.call("channel.status", { channel }).then(
          (res) => ({ channel, accounts: res.accounts || [] }),
          (err) => ({ channel, accounts: [], error: errorText(err) }),
        ),
      ),
    );
    if (!this.alive) return;
    const rows = mergeAccounts(listed, statuses);
    const problems = statuses.filter((s) => s.error).map((s) => h("p.error", { role: "alert" }, `${s.channel}: ${s.error}`));
    rerender(this.accountsBody, [
      problems,
      rows.length
        ? h("ul.account-list", rows.map((row) => this.accountItem(row)))
        : empty("No channel account yet. Set up a Telegram bot below, or connect a channel bridge to the gateway."),
    ]);
  }

  accountItem(row) {
    const name = `${row.channel} ${row.accountId}`;
    const id = `${row.channel}:${row.accountId}`;
    const start = h("button.small", { type: "button", dataset: { key: `start:${id}` }, "aria-label": `Start ${name}` }, "Start");
    const stop = h("button.small.danger", { type: "button", dataset: { key: `stop:${id}` }, "aria-label": `Stop ${name}` }, "Stop");
    const extra = row.extra || {};
    const details = [
      row.mode ? `mode ${row.mode}` : null,
      extra.botUser?.username ? `bot @${extra.botUser.username}` : null,
      extra.webhookUrl ? `webhook ${extra.webhookUrl}` : null,
      typeof extra.pendingUpdates === "number" ? `${extra.pendingUpdates} pending updates` : null,
      row.connectedAt ? `registered ${formatTime(row.connectedAt)}` : null,
      row.lastActivity ? `last message ${formatTime(row.lastActivity)}` : null,
    ].filter(Boolean);
    const item = h(
      "li.account",
      { dataset: { channel: row.channel, account: row.accountId } },
      h("div.account-name", h("strong", String(row.channel)), h("span.muted", ` · ${row.accountId}`), " ", statusBadges(row)),
      details.length ? h("div.account-details.muted", details.join(" · ")) : null,
      row.error ? h("p.account-error.error", String(row.error)) : null,
      h("div.row.account-actions", start, stop),
    );
    const control = async (method, button, label) => {
      if (method === "channel.stop" && !(await confirmAction(`Stop ${name}?`, stopWarning(row), "Stop"))) return;
      button.focus(); // back from the question: the keyboard is on the button pressed
      const done = [busy(start), busy(stop)];
      try {
        const res = await this.gw.call(method, { channel: row.channel, accountId: row.accountId, config: {} }, { timeoutMs: CONTROL_TIMEOUT_MS });
        toast(`${label}: ${row.channel} ${res.accountId || row.accountId}`, "ok");
      } catch (err) {
        failed(`${label} ${name}`, err);
      } finally {
        if (this.alive) await this.loadAccounts();
        for (const undo of done) undo(); // the focus goes to the same button of the account as drawn again
      }
    };
    start.addEventListener("click", () => control("channel.start", start, "Started"));
    stop.addEventListener("click", () => control("channel.stop", stop, "Stopped"));
    return item;
  }
}

/** One row per `{channel, accountId}`: the registry's entry joined with the channel's status. */
function mergeAccounts(listed, statuses) {
  const rows = new Map();
  const key = (channel, account) => `${channel}\u0000${account}`;
  for (const entry of listed) rows.set(key(entry.channel, entry.accountId), { ...entry });
  for (const { channel, accounts } of statuses) {
    for (const account of accounts) {
      const k = key(channel, account.accountId);
      rows.set(k, { ...(rows.get(k) || {}), channel, ...account });
    }
  }
  return [...rows.values()].sort((a, b) => `${a.channel}:${a.accountId}`.localeCompare(`${b.channel}:${b.accountId}`));
}

function statusBadges(row) {
  if (row.connected === undefined) return h("span.badge", "registered");
  if (row.connected) return h("span.badge.ok", "connected");
  if (row.authenticated) return h("span.badge.warn", "not connected");
  return h("span.badge.error", row.mode === "webhook" ? "not set up" : "disconnected");
}

function stopWarning(row) {
  return row.channel === "telegram"
    ? "Telegram's webhook is removed: messages to the bot wait at Telegram (up to a day) until it is started again."
    : "The channel bridge is asked to stop this account: nothing more comes in from it until it is started again.";
}

function section(title, id, badges, body) {
  const heading = h("h2", { id: `channels-${id}-title` }, title, " ", badges);
  return h(`section.card.channels-${id}`, { "aria-labelledby": heading.id }, heading, body);
}

// --- Telegram --------------------------------------------------------------------------------------------------

class TelegramSetup {
  constructor(gw, onChange) {
    this.gw = gw;
    this.onChange = onChange;
    this.section = {};
    this.account = h("input", { name: "accountId", value: "default", required: true, autocomplete: "off", spellcheck: "false", pattern: "[A-Za-z0-9_\\-]{1,64}" });
    this.token = h("input", { type: "password", name: "botToken", autocomplete: "new-password", spellcheck: "false", placeholder: "123456789:AA…" });
    this.webhook = h("input", { type: "url", name: "webhookUrl", autocomplete: "off", spellcheck: "false", placeholder: "https://bot.example.org/channels/telegram/default/webhook" });
    this.tokenHint = h("span");
    this.webhookHint = h("span");
    this.result = h("div.telegram-result", { "aria-live": "polite" });
    this.setup = h("button.primary", { type: "submit" }, "Set up");
    this.check = h("button", { type: "button", onclick: () => this.status() }, "Check status");
    this.remove = h("button.danger", { type: "button", onclick: () => this.stop() }, "Remove");
    this.buttons = [this.setup, this.check, this.remove];
    this.account.addEventListener("input", () => this.hints());
    const form = h(
      "form.telegram-form",
      { novalidate: true },
      h("div.telegram-fields",
        field("Account id", this.account, "Letters, digits, _ and -. One bot per account."),
        field("Bot token", this.token, this.tokenHint),
        field("Webhook URL (optional)", this.webhook, this.webhookHint),
      ),
      h("div.row", this.setup, this.check, this.remove),
      this.result,
    );
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.start();
    });
    const heading = h("h2", { id: "channels-telegram-title" }, "Telegram bot");
    this.element = h(
      "section.card.channels-telegram",
      { "aria-labelledby": heading.id },
      heading,
      h("p.hint", "Create a bot with @BotFather, paste its token here, and the gateway registers a webhook so Telegram delivers the bot's messages to it."),
      form,
    );
    this.hints();
  }

  async load() {
    try {
      const res = await this.gw.call("config.get", { path: "channels.telegram" });
      this.section = res.value && typeof res.value === "object" ? res.value : {};
    } catch {
      this.section = {};
    }
    this.hints();
  }

  accountId() {
    return this.account.value.trim();
  }

  stored() {
    const accounts = this.section.accounts && typeof this.section.accounts === "object" ? this.section.accounts : {};
    return accounts[this.accountId()] || null;
  }

  hints() {
    const stored = this.stored();
    this.tokenHint.textContent = stored?.botToken
      ? "A token is stored for this account (hidden). Leave empty to keep it, or paste a new one to replace it."
      : "No token is stored for this account yet. It is written to the gateway's configuration and never shown again.";
    const id = this.accountId() || "<account>";
    const base = typeof this.section.publicBaseUrl === "string" && this.section.publicBaseUrl;
    if (stored?.webhookUrl) this.webhookHint.textContent = `Leave empty to keep ${stored.webhookUrl}.`;
    else if (base) this.webhookHint.textContent = `Leave empty to use ${base.replace(/\/$/, "")}/channels/telegram/${id}/webhook.`;
    else this.webhookHint.textContent = `The public HTTPS address Telegram posts to: this gateway's /channels/telegram/${id}/webhook. Needed unless channels.telegram.publicBaseUrl is set.`;
  }

  busy(on) {
    for (const b of this.buttons) b.disabled = on;
  }

  validAccount() {
    const id = this.accountId();
    if (ACCOUNT_ID.test(id)) return id;
    this.show("error", "The account id may hold only letters, digits, _ and - (at most 64).");
    this.account.focus();
    return null;
  }

  show(kind, title, ...lines) {
    fill(this.result, h(`div.outcome.${kind}`, { role: kind === "error" ? "alert" : "status" }, h("strong", title), lines.filter(Boolean).map((l) => (l instanceof Node ? l : h("p", l)))));
  }

  async start() {
    const accountId = this.validAccount();
    if (!accountId) return;
    const token = this.token.value.trim();
    const webhookUrl = this.webhook.value.trim();
    if (webhookUrl && !/^https:\/\//i.test(webhookUrl)) {
      this.show("error", "The webhook URL must start with https:// (Telegram posts only to HTTPS).");
      this.webhook.focus();
      return;
    }
    this.busy(true);
    this.show("pending", "Setting up…");
    let stored = false;
    try {
      if (token) {
        await this.gw.call("config.set", { path: `channels.telegram.accounts.${accountId}.botToken`, value: token });
        this.token.value = ""; // write-only: the token never stays in the page
        stored = true;
      }
      const config = webhookUrl ? { webhookUrl } : {};
      const res = await this.gw.call("channel.start", { channel: "telegram", accountId, config }, { timeoutMs: CONTROL_TIMEOUT_MS });
      const bot = res.botUser?.username ? `@${res.botUser.username}` : "the bot";
      this.show("ok", `Telegram ${accountId} is set up.`, `Telegram now delivers ${bot}'s messages to ${res.webhookUrl || "the webhook"}.`, stored ? "The bot token is stored." : null);
    } catch (err) {
      this.show("error", stored ? "The bot token is stored, but starting the bot failed:" : "Setting up the bot failed:", errorText(err), explain(err.message, accountId));
    } finally {
      this.busy(false);
      await this.load();
      this.onChange();
    }
  }

  async status() {
    const accountId = this.validAccount();
    if (!accountId) return;
    this.busy(true);
    try {
      const res = await this.gw.call("channel.status", { channel: "telegram", accountId });
      const a = (res.accounts || [])[0] || {};
      const extra = a.extra || {};
      const lines = [
        `Bot token: ${a.authenticated ? "accepted by Telegram" : "not accepted or not checked"}.`,
        extra.botUser?.username ? `Bot: @${extra.botUser.username}` : null,
        extra.webhookUrl ? `Webhook: ${extra.webhookUrl}` : null,
        typeof extra.pendingUpdates === "number" ? `Updates waiting at Telegram: ${extra.pendingUpdates}` : null,
        a.lastActivity ? `Last message: ${formatTime(a.lastActivity)}` : null,
        a.error ? h("p.error", String(a.error)) : null,
      ];
      this.show(a.connected ? "ok" : a.error ? "error" : "pending", `Telegram ${accountId}: ${a.connected ? "connected" : "not connected"}`, ...lines);
    } catch (err) {
      this.show("error", "Reading the status failed:", errorText(err));
    } finally {
      this.busy(false);
    }
  }

  async stop() {
    const accountId = this.validAccount();
    if (!accountId) return;
    if (!(await confirmAction(`Remove Telegram ${accountId}?`, "The webhook is deleted at Telegram: the bot stops delivering messages here until it is set up again. Its token stays stored.", "Remove"))) return;
    this.busy(true);
    try {
      await this.gw.call("channel.stop", { channel: "telegram", accountId }, { timeoutMs: CONTROL_TIMEOUT_MS });
      this.show("ok", `Telegram ${accountId} removed.`, "Its webhook is deleted; set it up again to bring it back.");
    } catch (err) {
      this.show("error", "Removing the bot failed:", errorText(err));
    } finally {
      this.busy(false);
      this.onChange();
    }
  }
}

/** What to do about the errors a first setup usually meets. */
function explain(message, accountId) {
  const text = String(message || "");
  if (/public URL/i.test(text)) {
    return h(
      "p.hint",
      `Telegram must reach this gateway from the internet. Enter the webhook URL above (the public HTTPS address of this gateway's /channels/telegram/${accountId}/webhook), or set channels.telegram.publicBaseUrl (Settings → Advanced) to the gateway's public base URL and leave the field empty.`,
    );
  }
  if (/cannot reach the Bot API/i.test(text)) return h("p.hint", "The gateway could not reach api.telegram.org: check its internet access (or a proxy), then try again.");
  if (/not a Telegram bot token|Unauthorized|no bot token/i.test(text)) return h("p.hint", "Paste the token @BotFather gave for the bot (digits, a colon, then letters and digits) and try again.");
  return null;
}

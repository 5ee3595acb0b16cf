// Small helpers every view uses: building elements, notices, dialogs, markdown and formatting. Text always goes
// in as text (textContent), never as HTML, so nothing a model, a node or a file says can run as script here.

/**
 * An element: h("button.primary", {onclick, type: "button"}, "Save"). The tag may carry `.class`es and one `#id`;
 * attributes: `class`, `dataset`, `on…` handlers, boolean `true`/`false`, anything else as an attribute.
 * Children: nodes, strings (as text), arrays of either, null/false (skipped).
 */
export function h(spec, attrs = {}, ...children) {
  const [tagAndId, ...classes] = spec.split(".");
  const [tag, id] = tagAndId.split("#");
  const el = document.createElement(tag || "div");
  if (id) el.id = id;
  if (classes.length) el.classList.add(...classes);
  if (attrs && (typeof attrs !== "object" || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = {};
  }
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.classList.add(...String(value).split(/\s+/).filter(Boolean));
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (URL_ATTRIBUTES.has(key) && !safeUrl(String(value), key === "src")) continue; // never javascript: etc.
    else if (key === "value") el.value = value;
    else if (key === "checked") el.checked = Boolean(value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

const URL_ATTRIBUTES = new Set(["href", "src", "action", "formaction", "xlink:href"]);
const SAFE_URL = /^(https?:|mailto:|#|\/|\.{0,2}\/|[^:]*$)/i;

/** Whether a URL may go into an `href`/`src`: web and mail addresses, this page's own (relative, `#…`), and for
 * images `blob:` and `data:` images of the types `IMAGE_TYPES` names. */
export function safeUrl(url, image = false) {
  if (image && /^blob:/i.test(url)) return true;
  if (image && /^data:/i.test(url)) return IMAGE_TYPES.test(url.slice(5).split(/[;,]/)[0]);
  return SAFE_URL.test(url.trim());
}

/** The image types the console shows (never SVG: it can carry script and links). */
export const IMAGE_TYPES = /^image\/(png|jpeg|gif|webp)$/i;
const GSV_MEDIA = /^media\/[a-f0-9-]+\.(png|jpe?g|gif|webp)$/i; // what GET /media/{name} serves, of IMAGE_TYPES

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// --- notices and dialogs ---------------------------------------------------------------------------------------

/** A short notice at the bottom of the screen (`kind`: info, ok, error); errors stay until dismissed. */
export function toast(message, kind = "info") {
  const region = document.getElementById("toasts");
  const close = h("button.icon", { type: "button", "aria-label": "Dismiss" }, "×");
  const item = h(`div.toast.${kind}`, { role: kind === "error" ? "alert" : "status" }, h("span", message), close);
  close.addEventListener("click", () => item.remove());
  region.append(item);
  if (kind !== "error") setTimeout(() => item.remove(), 4000);
  return item;
}

/** An error from a gateway call as one line: its message, then its code. */
export function errorText(err) {
  const message = err && err.message ? err.message : String(err);
  return err && err.code ? `${message} (${err.code})` : message;
}

/** An error from a gateway call, as a notice that says which action failed. */
export function failed(action, err) {
  return toast(`${action} failed: ${errorText(err)}`, "error");
}

/**
 * A modal dialog: `body` (nodes) and buttons [{label, value, kind}]; resolves with the pressed button's value
 * (null for Escape). `onsubmit(value)` may return false to keep the dialog open (a form that did not validate).
 * @param {string} title
 * @param {any} body
 * @param {{label: string, value: any, kind?: string}[]} [buttons]
 * @param {((value: any) => any) | null} [onsubmit]
 */
export function dialog(title, body, buttons = [{ label: "OK", value: true, kind: "primary" }], onsubmit = null) {
  return new Promise((resolve) => {
    const box = h("dialog.modal", { "aria-label": title });
    const form = h("form", { method: "dialog" });
    const row = h("div.actions");
    for (const b of buttons) {
      const kinds = (b.kind || "plain").split(/\s+/).filter(Boolean);
      const type = kinds.includes("primary") ? "submit" : "button";
      row.append(h(`button.${kinds.join(".")}`, { type, dataset: { v: JSON.stringify(b.value) } }, b.label));
    }
    form.append(h("h2", title), h("div.dialog-body", body), row);
    box.append(form);
    document.body.append(box);
    const done = (value) => {
      box.close();
      box.remove();
      resolve(value);
    };
    row.addEventListener("click", async (ev) => {
      const button = ev.target.closest("button");
      if (!button || button.type === "submit") return;
      done(JSON.parse(button.dataset.v));
    });
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const value = JSON.parse((ev.submitter || row.querySelector("[type=submit]")).dataset.v);
      if (onsubmit && (await onsubmit(value)) === false) return;
      done(value);
    });
    box.addEventListener("cancel", (ev) => {
      ev.preventDefault();
      done(null);
    });
    box.showModal();
    const first = /** @type {HTMLElement | null} */ (box.querySelector("input, textarea, select") || box.querySelector("button.primary"));
    first?.focus();
  });
}

/** Ask before something that cannot be undone; Cancel has the focus, so Enter alone does nothing harmful. */
export function confirmAction(title, message, label = "Delete") {
  const answer = dialog(title, [h("p", message)], [
    { label: "Cancel", value: false },
    { label, value: true, kind: "primary danger" },
  ]).then(Boolean);
  /** @type {HTMLElement | null} */ (document.querySelector("dialog.modal[open] .actions button"))?.focus();
  return answer;
}

// --- formatting ------------------------------------------------------------------------------------------------

export function formatTime(ms) {
  if (!ms && ms !== 0) return "—";
  const d = new Date(ms);
  const today = new Date();
  const sameDay = d.toDateString() === today.toDateString();
  return sameDay ? d.toLocaleTimeString() : d.toLocaleString();
}

export function formatDuration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 1 : 0)} s`;
  const m = Math.floor(ms / 60000);
  const s = Math.round((ms % 60000) / 1000);
  return m < 60 ? `${m} min ${s} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
}

export function formatBytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KB", "MB", "GB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

export function formatNumber(n) {
  return n === null || n === undefined ? "—" : Number(n).toLocaleString();
}

/** Text that may be long, cut to `max` characters: [the text, whether it was cut]. */
export function clip(text, max) {
  const s = String(text ?? "");
  return s.length <= max ? [s, false] : [s.slice(0, max), true];
}

// --- markdown --------------------------------------------------------------------------------------------------

const SAFE_LINK = /^(https?:|mailto:|#)/i;

/** Markdown as elements: headings, paragraphs, lists, quotes, code blocks, rules, tables, and inline emphasis,
 * code and links (http, https, mailto, and `#…` within the console). Anything else stays text. */
export function markdown(source) {
  const root = h("div.md");
  const lines = String(source ?? "").replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```|~~~)\s*([\w+-]*)/);
    if (fence) {
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i += 1;
      root.append(h("pre", h("code", fence[2] ? { "data-lang": fence[2] } : {}, body.join("\n"))));
      continue;
    }
    if (!line.trim()) {
      i += 1;
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      root.append(h(`h${heading[1].length}`, inline(heading[2])));
      i += 1;
      continue;
    }
    if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      root.append(h("hr"));
      i += 1;
      continue;
    }
    if (/^\s*>/.test(line)) {
      const body = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) body.push(lines[i++].replace(/^\s*>\s?/, ""));
      root.append(h("blockquote", markdown(body.join("\n"))));
      continue;
    }
    if (/^\s*([-*+]|\d+[.)])\s+/.test(line)) {
      const ordered = /^\s*\d+[.)]/.test(line);
      const list = h(ordered ? "ol" : "ul");
      while (i < lines.length && /^\s*([-*+]|\d+[.)])\s+/.test(lines[i])) {
        let item = lines[i++].replace(/^\s*([-*+]|\d+[.)])\s+/, "");
        while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !/^\s*([-*+]|\d+[.)])\s+/.test(lines[i])) {
          item += " " + lines[i++].trim();
        }
        const task = item.match(/^\[([ xX])\]\s+(.*)$/);
        if (task) list.append(h("li.task", h("input", { type: "checkbox", disabled: true, checked: task[1] !== " " }), " ", inline(task[2])));
        else list.append(h("li", inline(item)));
      }
      root.append(list);
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && /^\s*\|?\s*:?-{3,}/.test(lines[i + 1])) {
      const cells = (row) => row.trim().replace(/^\||\|$/g, "").split("|").map((c) => c.trim());
      const head = cells(line);
      i += 2;
      const body = [];
      while (i < lines.length && lines[i].includes("|") && lines[i].trim()) body.push(cells(lines[i++]));
      root.append(
        h("div.table-wrap", h("table", h("thead", h("tr", head.map((c) => h("th", inline(c))))), h("tbody", body.map((r) => h("tr", r.map((c) => h("td", inline(c)))))))),
      );
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() && !/^(#{1,6}\s|\s*```|\s*~~~|\s*>|\s*([-*+]|\d+[.)])\s+)/.test(lines[i])) {
      para.push(lines[i++]);
    }
    if (!para.length) para.push(lines[i++]);
    root.append(h("p", inline(para.join("\n"))));
  }
  return root;
}

// `_` and `__` open only where no letter or digit is before them and close only where none follows (CommonMark's
// rule: `snake_case_names` and `laptop__Bash` stay as they are); `*` and `**` also work inside a word.
const INLINE =
  /(`+)([\s\S]*?)\1|\*\*([\s\S]+?)\*\*|(?<![\p{L}\p{N}_])__(?!\s)([\s\S]+?)(?<!\s)__(?![\p{L}\p{N}_])|\*([^*\s][^*]*?)\*|(?<![\p{L}\p{N}_])_(?![\s_])([\s\S]*?[^\s_])_(?![\p{L}\p{N}_])|~~([\s\S]+?)~~|\[([^\]]+)\]\(([^)\s]+)\)|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])|\n/gu;

/** Inline markdown as nodes. */
export function inline(text) {
  const out = [];
  let last = 0;
  const s = String(text ?? "");
  for (const m of s.matchAll(INLINE)) {
    if (m.index > last) out.push(document.createTextNode(s.slice(last, m.index)));
    if (m[1]) out.push(h("code", m[2]));
    else if (m[3] || m[4]) out.push(h("strong", inline(m[3] || m[4])));
    else if (m[5] || m[6]) out.push(h("em", inline(m[5] || m[6])));
    else if (m[7]) out.push(h("del", inline(m[7])));
    else if (m[8]) out.push(SAFE_LINK.test(m[9]) ? h("a", { href: m[9], target: "_blank", rel: "noopener noreferrer" }, inline(m[8])) : document.createTextNode(m[0]));
    else if (m[10]) out.push(h("a", { href: m[10], target: "_blank", rel: "noopener noreferrer" }, m[10]));
    else out.push(h("br"));
    last = m.index + m[0].length;
  }
  if (last < s.length) out.push(document.createTextNode(s.slice(last)));
  return out;
}

// --- keeping the keyboard's place --------------------------------------------------------------------------------
// A control that is drawn again carries `data-key` (stable across redraws), so the focus can follow it.

/** Re-render `box` with `nodes`, keeping keyboard focus on the control (by data-key) that had it. */
export function rerender(box, nodes) {
  const active = /** @type {HTMLElement | null} */ (document.activeElement);
  const key = active && box.contains(active) ? active.dataset.key : null;
  fill(box, nodes);
  if (key) box.querySelector(`[data-key="${CSS.escape(key)}"]`)?.focus();
}

/** Disable a button while its call is in flight; the returned function undoes it, and gives the keyboard focus
 * back to it (or to the control drawn in its place) if disabling it had dropped the focus. */
export function busy(button, text) {
  const before = button.textContent;
  const focused = document.activeElement === button;
  button.disabled = true;
  button.setAttribute("aria-busy", "true");
  if (text) button.textContent = text;
  return () => {
    button.disabled = false;
    button.removeAttribute("aria-busy");
    if (text) button.textContent = before;
    if (focused && (!document.activeElement || document.activeElement === document.body)) {
      const key = button.dataset.key;
      const target = button.isConnected || !key ? button : document.querySelector(`[data-key="${CSS.escape(key)}"]`);
      target?.focus();
    }
  };
}

// --- images ----------------------------------------------------------------------------------------------------

const SESSION_IMAGE = /^media\/(.+)\/([0-9a-f-]{8,64}\.(png|jpe?g|gif|webp))$/i; // a tool's image, kept by the session

/**
 * An image block ({type: "image", data (base64) + mimeType, or r2Key: a GSV media name}) as an <img>: only the types
 * of IMAGE_TYPES (never SVG). A stored media file opens whole in a new tab from a link (the gateway serves it inert);
 * inline data never becomes a link (the chat transcript, and a tool's image results in the Nodes view). An image a
 * tool returned in a session (`media/<session>/<name>`) and a private upload (`media/<name>`, the xeno bridge's) need
 * the gateway token: with `gw` they are fetched as a blob.
 */
export function imageNode(b, alt = null, gw = null) {
  const mime = typeof b.mimeType === "string" ? b.mimeType : "";
  const shown = alt || `An image${mime ? ` (${mime})` : ""}`;
  if (typeof b.data === "string" && IMAGE_TYPES.test(mime)) {
    return h("span.msg-image", h("img", { src: `data:${mime};base64,${b.data}`, alt: shown })); // in memory already: not lazy
  }
  const gsv = typeof b.r2Key === "string" && GSV_MEDIA.test(b.r2Key) && (!mime || IMAGE_TYPES.test(mime));
  if (gsv && !gw) {
    const src = b.r2Key; // relative: the gateway's /media/
    return h("a.msg-image", { href: src, target: "_blank", rel: "noopener noreferrer" }, h("img", { src, alt: shown, loading: "lazy" }));
  }
  const kept = typeof b.r2Key === "string" ? b.r2Key.match(SESSION_IMAGE) : null;
  if ((gsv || kept) && gw && (!mime || IMAGE_TYPES.test(mime))) {
    // with the token: an upload made with it (the xeno bridge's) is private, a tool's image is the session's
    const img = h("img", { alt: shown });
    const box = h("span.msg-image", img);
    const path = gsv ? `/${b.r2Key}` : `/api/session-media/${encodeURIComponent(kept[1])}/${kept[2]}`;
    gw.blobUrl(path).then(
      (url) => img.setAttribute("src", url),
      // a public object too large for a Lambda answer redirects to the bucket, which the page shows but cannot fetch
      () => (gsv ? img.setAttribute("src", b.r2Key) : box.replaceChildren(h("span.hint.image-missing", `[${shown}: could not be loaded]`))),
    );
    return box;
  }
  return h("p.hint.image-missing", `[An image${mime ? ` (${mime})` : ""} that this page cannot show]`);
}

// --- misc ------------------------------------------------------------------------------------------------------

/** A random hex string of `bytes` bytes (ids of elements, sessions, clients). */
export function randomId(bytes = 4) {
  return [...crypto.getRandomValues(new Uint8Array(bytes))].map((b) => b.toString(16).padStart(2, "0")).join("");
}

export function debounce(fn, ms) {
  let timer = null;
  const later = (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
  later.cancel = () => clearTimeout(timer); // a view's destroy: no call after it is gone
  return later;
}

/** A labelled form field: label text, the control, and an optional hint under it. */
export function field(label, control, hint = null) {
  const id = control.id || `f-${randomId()}`;
  control.id = id;
  return h("div.field", h("label", { for: id }, label), control, hint ? h("small.hint", hint) : null);
}

/** A section's header: a title and the actions beside it. */
export function header(title, ...actions) {
  return h("header.view-head", h("h1", title), h("div.view-actions", actions));
}

/** A placeholder for an empty list. */
export function empty(message) {
  return h("p.empty", message);
}

// --- keeping a view loaded ------------------------------------------------------------------------------------

/**
 * How a view keeps what it shows read from the gateway. `load()` reads and draws; it runs at `start()`, whenever
 * the connection opens again, on the Refresh `button` (disabled while it runs) and on `refresh()` (after a change
 * the view made). With `everyMs`, `poll` (`load` unless given: a quieter read) runs that often while the page is
 * visible, and, with `onFocus`, when the window gets the focus back. `stop()` ends all of it and `alive` turns
 * false: a read that ends after it draws nothing.
 */
export class Loader {
  /**
   * @param {{on: (event: string, fn: (s: any) => void) => () => void}} gw
   * @param {() => any} load
   * @param {{everyMs?: number, poll?: (() => any) | null, onFocus?: boolean}} [options]
   */
  constructor(gw, load, { everyMs = 0, poll = null, onFocus = false } = {}) {
    this.gw = gw;
    this.load = load;
    this.options = { everyMs, poll: poll || load, onFocus };
    this.alive = true;
    /** @type {(() => void)[]} */
    this.stops = [];
    this.button = h("button", { type: "button", onclick: () => this.refresh() }, icon("refresh"), " Refresh");
  }

  start() {
    this.stops.push(this.gw.on("status", (s) => s.state === "open" && this.refresh()));
    const { everyMs, poll, onFocus } = this.options;
    if (everyMs) {
      const tick = () => {
        if (this.alive && document.visibilityState === "visible") poll();
      };
      const timer = setInterval(tick, everyMs);
      this.stops.push(() => clearInterval(timer));
      if (onFocus) {
        window.addEventListener("focus", tick);
        this.stops.push(() => window.removeEventListener("focus", tick));
      }
    }
    return this.refresh();
  }

  async refresh() {
    if (!this.alive) return;
    this.button.disabled = true;
    try {
      await this.load();
    } finally {
      this.button.disabled = false;
    }
  }

  stop() {
    this.alive = false;
    for (const stop of this.stops.splice(0)) stop();
  }
}

// --- icons -----------------------------------------------------------------------------------------------------

const ICONS = {
  chat: "M4 5h16v11H10l-6 4z",
  nodes: "M3 4h18v12H3z M8 20h8 M12 16v4",
  workspace: "M6 3h9l4 4v14H6z M14 3v5h5 M9 13h6 M9 17h6",
  schedules: "M12 3a9 9 0 1 0 0.01 0z M12 7v5l3 2",
  channels: "M3 11l18-8-7 18-3-7z M11 14l10-11",
  settings: "M4 6h16 M4 12h16 M4 18h16 M9 4v4 M15 10v4 M7 16v4",
  devices: "M7 3h10v18H7z M11 18h2 M9 7a5 5 0 0 1 6 0",
  mcp: "M9 3v5 M15 3v5 M6 8h12v3a6 6 0 0 1-12 0z M12 17v4",
  agents: "M9 8a3 3 0 1 0 0.01 0z M3 20a6 6 0 0 1 12 0 M16 5a3 3 0 0 1 0 6 M17 14a6 6 0 0 1 4 6",
  sun: "M12 8a4 4 0 1 0 0.01 0z M12 2v2 M12 20v2 M4.9 4.9l1.4 1.4 M17.7 17.7l1.4 1.4 M2 12h2 M20 12h2 M4.9 19.1l1.4-1.4 M17.7 6.3l1.4-1.4",
  moon: "M20 14.5A8 8 0 0 1 9.5 4a8 8 0 1 0 10.5 10.5z",
  stop: "M6 6h12v12H6z",
  send: "M4 12l16-8-6 16-2-6z",
  plus: "M12 5v14 M5 12h14",
  refresh: "M20 11a8 8 0 1 0-2.3 5.7 M20 4v7h-7",
  close: "M6 6l12 12 M18 6L6 18",
};

/** A small line icon (`name` of ICONS), drawn in the text's colour; decorative unless given a `label`. */
export function icon(name, label = null) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("width", "18");
  svg.setAttribute("height", "18");
  svg.setAttribute("fill", "none");
  svg.setAttribute("stroke", "currentColor");
  svg.setAttribute("stroke-width", "2");
  svg.setAttribute("stroke-linecap", "round");
  svg.setAttribute("stroke-linejoin", "round");
  svg.classList.add("icon-svg");
  if (label) {
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", label);
  } else {
    svg.setAttribute("aria-hidden", "true");
  }
  const path = document.createElementNS(ns, "path");
  path.setAttribute("d", ICONS[name] || ICONS.plus);
  svg.append(path);
  return svg;
}

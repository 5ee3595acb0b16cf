// Workspace: browse the agent's workspace (`#/workspace/<dir>/` for a folder, `#/workspace/<file>` for a file), read a
// file (markdown rendered, anything else as text), edit and save it, create and delete files. A save names the
// version it started from (`ifMatch`: the read's `etag`; `ifNoneMatch: "*"` for a new file), so a change made
// meanwhile is shown as a conflict (409) instead of being overwritten. Unsaved edits are guarded against leaving.
// Methods: workspace.list, workspace.read, workspace.write, workspace.delete.

import { confirmAction, dialog, empty, failed, field, fill, formatBytes, formatTime, h, header, icon, markdown, toast } from "../ui.js";

const MARKDOWN = /\.(md|markdown|mdx)$/i;
const DRAFT_KEY = "orbital.console.workspace.draft";

export default {
  id: "workspace",
  title: "Workspace",
  icon: "workspace",
  mount(container, ctx) {
    const view = new WorkspaceView(container, ctx);
    view.start(ctx.params);
    return { destroy: () => view.destroy(), update: (params) => view.show(params), canLeave: () => view.canLeave() };
  },
};

/** `#/workspace/…` for a path: each part encoded, a folder keeps its trailing slash. */
function href(path) {
  return path ? `#/workspace/${path.split("/").map(encodeURIComponent).join("/")}` : "#/workspace";
}

function baseName(path) {
  const parts = path.replace(/\/$/, "").split("/");
  return parts[parts.length - 1] + (path.endsWith("/") ? "/" : "");
}

function parentDir(path) {
  const trimmed = path.replace(/\/$/, "");
  const cut = trimmed.lastIndexOf("/");
  return cut < 0 ? "" : trimmed.slice(0, cut + 1);
}

/** A workspace path the user typed: relative, no `..`, not a folder. Returns an error message or null. */
function badPath(path) {
  if (!path) return "Give the file a name.";
  if (path.startsWith("/")) return "Use a path inside the workspace (without a leading /).";
  if (path.endsWith("/")) return "That is a folder: add a file name after the /.";
  if (path.split("/").some((p) => p === ".." || p === "." || p === "")) return "Use plain folder names: no empty parts, . or ..";
  return null;
}

class WorkspaceView {
  constructor(container, ctx) {
    this.container = container;
    this.gw = ctx.gw;
    this.navigate = ctx.navigate;
    this.path = "";
    this.file = null; // the file shown: {path, content, etag, size, lastModified, truncated, resolvedSource}
    this.edit = null; // while editing: {path, base, etag, isNew, textarea, conflict}
    this.seq = 0; // the latest load; older answers are ignored
    this.showSource = false;
    this.alive = true;
    this.asking = null; // the open "discard your changes?" question, if any
    this.off = [];
  }

  start(params) {
    this.newButton = h("button", { type: "button", onclick: () => this.askNewFile() }, icon("plus"), " New file");
    const refresh = () => {
      if (this.dirty()) return toast("Save or cancel your changes first: Refresh would replace them.");
      this.edit = null;
      return this.reload();
    };
    this.refreshButton = h("button", { type: "button", onclick: refresh }, icon("refresh"), " Refresh");
    this.crumbs = h("nav.ws-crumbs", { "aria-label": "Breadcrumbs" });
    this.body = h("div.ws-body");
    this.container.append(header("Workspace", this.newButton, this.refreshButton), this.crumbs, this.body);
    this.listen(window, "beforeunload", (ev) => {
      if (this.dirty()) {
        this.stashDraft(); // if the page does go, the text is offered again when it comes back
        ev.preventDefault();
        ev.returnValue = "";
      }
    });
    this.listen(window, "keydown", (ev) => {
      if (this.edit && (ev.ctrlKey || ev.metaKey) && !ev.altKey && ev.key.toLowerCase() === "s") {
        ev.preventDefault();
        this.save();
      }
    });
    this.off.push(this.gw.on("status", (s) => s.state === "open" && !this.edit && this.reload()));
    this.show(params);
  }

  listen(target, type, fn, capture = false) {
    target.addEventListener(type, fn, capture);
    this.off.push(() => target.removeEventListener(type, fn, capture));
  }

  destroy() {
    this.alive = false;
    if (this.dirty()) this.stashDraft(); // never lose typed text, however the view went away
    for (const off of this.off) off();
  }

  show(params) {
    const path = params.join("/");
    if (this.edit && path === this.edit.path) return;
    this.path = path;
    this.edit = null;
    this.reload();
  }

  reload() {
    if (this.edit) return;
    if (!this.path || this.path.endsWith("/")) this.openDir(this.path);
    else this.openFile(this.path);
  }

  // --- leaving with unsaved changes ------------------------------------------------------------------------------
  // The shell asks `canLeave` before the address changes, whatever changes it; leaving the page asks the browser's
  // own question (`beforeunload`), and a draft left anyway is offered again on the same file.

  dirty() {
    return Boolean(this.edit && (this.edit.isNew ? this.edit.textarea.value !== "" : this.edit.textarea.value !== this.edit.base));
  }

  /** Asked by the shell before the address changes: true at once without unsaved changes, else the user's answer
   * (one question, however many times the address changes meanwhile). */
  canLeave() {
    if (!this.dirty()) return true;
    if (!this.asking) {
      this.asking = this.confirmDiscard().then((discard) => {
        this.asking = null;
        if (discard) {
          this.edit = null;
          this.dropDraft();
        }
        return discard;
      });
    }
    return this.asking;
  }

  // a draft left behind by leaving the page's view without being asked, offered again on the same file
  stashDraft() {
    const e = this.edit;
    const draft = { path: e.path, text: e.textarea.value, etag: e.etag, isNew: e.isNew, at: Date.now() };
    try {
      sessionStorage.setItem(DRAFT_KEY, JSON.stringify(draft));
    } catch {
      // storage full or off: nothing more to do
    }
  }

  takeDraft() {
    try {
      const draft = JSON.parse(sessionStorage.getItem(DRAFT_KEY) || "null");
      return draft && typeof draft.path === "string" && typeof draft.text === "string" ? draft : null;
    } catch {
      return null;
    }
  }

  dropDraft() {
    sessionStorage.removeItem(DRAFT_KEY);
  }

  confirmDiscard() {
    return confirmAction("Discard your changes?", `${this.edit.path} has changes that are not saved. Leave and lose them?`, "Discard changes");
  }

  // --- breadcrumbs --------------------------------------------------------------------------------------------

  renderCrumbs(path, extra = null) {
    const parts = path.split("/").filter(Boolean);
    const items = [path || extra ? h("a", { href: "#/workspace" }, "Workspace") : h("span", { "aria-current": "page" }, "Workspace")];
    let sofar = "";
    parts.forEach((part, i) => {
      const last = i === parts.length - 1 && !extra;
      const isDir = i < parts.length - 1 || path.endsWith("/");
      sofar += part + (isDir ? "/" : "");
      items.push(h("span.sep", { "aria-hidden": "true" }, "/"));
      items.push(last ? h("span", { "aria-current": "page" }, part) : h("a", { href: href(sofar) }, part));
    });
    if (extra) items.push(h("span.sep", { "aria-hidden": "true" }, "/"), h("span", { "aria-current": "page" }, extra));
    fill(this.crumbs, items);
  }

  // --- a folder ------------------------------------------------------------------------------------------------

  async openDir(dir) {
    const seq = ++this.seq;
    this.file = null;
    this.renderCrumbs(dir);
    this.busy(true);
    try {
      const res = await this.gw.call("workspace.list", dir ? { path: dir } : {});
      if (seq !== this.seq || !this.alive) return;
      this.renderDir(dir, res);
    } catch (err) {
      if (seq !== this.seq || !this.alive) return;
      fill(this.body, h("p.error", { role: "alert" }, `Could not list ${dir || "the workspace"}: ${err.message}`));
    } finally {
      if (seq === this.seq) this.busy(false);
    }
  }

  renderDir(dir, res) {
    const dirs = res.directories || [];
    const files = res.files || [];
    const rows = [
      ...dirs.map((d) => h("li.ws-entry.dir", h("a", { href: href(d) }, h("span.ws-kind", { "aria-hidden": "true" }, "▸"), baseName(d)))),
      ...files.map((f) => this.fileRow(f)),
    ];
    const draft = this.takeDraft();
    fill(
      this.body,
      draft && draft.isNew && parentDir(draft.path) === dir ? this.draftOffer(draft) : null,
      h(
        "section.card.ws-list",
        { "aria-label": dir ? `Folder ${dir}` : "Workspace" },
        rows.length ? h("ul.ws-entries", rows) : empty(dir ? "This folder is empty." : "The workspace is empty."),
        res.truncated ? h("p.hint", "This folder has more entries than fit one answer: only the first ones are listed.") : null,
      ),
    );
  }

  fileRow(path) {
    const del = h("button.icon.ws-del", { type: "button", "aria-label": `Delete ${path}`, title: `Delete ${baseName(path)}` }, icon("close"));
    del.addEventListener("click", () => this.remove(path, del));
    return h("li.ws-entry.file", h("a", { href: href(path) }, h("span.ws-kind", { "aria-hidden": "true" }, "·"), baseName(path)), del);
  }

  // --- a file --------------------------------------------------------------------------------------------------

  async openFile(path) {
    const seq = ++this.seq;
    this.renderCrumbs(path);
    this.busy(true);
    try {
      const res = await this.gw.call("workspace.read", { path });
      if (seq !== this.seq || !this.alive) return;
      this.file = res;
      this.renderFile();
    } catch (err) {
      if (seq !== this.seq || !this.alive) return;
      if (err.code === 404) await this.notFound(path, seq);
      else fill(this.body, h("p.error", { role: "alert" }, `Could not read ${path}: ${err.message}`));
    } finally {
      if (seq === this.seq) this.busy(false);
    }
  }

  /** No such file: a folder of that name (typed without its /) opens as a folder; anything else says so. */
  async notFound(path, seq) {
    try {
      const res = await this.gw.call("workspace.list", { path: `${path}/` });
      if (seq !== this.seq || !this.alive) return; // left meanwhile: never drag the user back
      if (res.files.length || res.directories.length) {
        location.replace(href(`${path}/`));
        return;
      }
    } catch {
      // fall through to the message
    }
    if (seq !== this.seq || !this.alive) return;
    const up = parentDir(path);
    fill(
      this.body,
      h("section.card", h("h2", "Not found"), h("p", `There is no file ${path} in the workspace.`), h("p", h("a", { href: href(up) }, `Back to ${up || "the workspace"}`))),
    );
  }

  renderFile() {
    const f = this.file;
    const isMd = MARKDOWN.test(f.path);
    const editButton = h("button.primary", { type: "button", onclick: () => this.startEdit() }, "Edit");
    if (f.truncated) {
      editButton.disabled = true;
      editButton.title = "Too large to edit here";
    }
    const sourceButton = isMd
      ? h("button", { type: "button", "aria-pressed": String(this.showSource), onclick: () => this.toggleSource() }, "Show source")
      : null;
    const delButton = h("button.danger", { type: "button" }, "Delete");
    delButton.addEventListener("click", () => this.remove(f.path, delButton));
    const modified = f.lastModified ? ` · changed ${formatTime(Date.parse(f.lastModified))}` : "";
    fill(
      this.body,
      h(
        "section.card.ws-file",
        { "aria-label": `File ${f.path}` },
        h("div.ws-file-head", h("h2", baseName(f.path)), h("span.muted.ws-meta", `${formatBytes(f.size)}${modified}`), h("div.ws-actions", sourceButton, editButton, delButton)),
        f.truncated ? h("p.ws-note", { role: "note" }, `This file is ${formatBytes(f.size)}: only its first ${formatBytes(f.nextOffset || f.content.length)} are shown, read-only (the console reads at most 96 KB of a file).`) : null,
        this.draftOfferFor(f),
        f.resolvedSource === "global" ? h("p.ws-note", { role: "note" }, "This is the shared skill: saving it writes this agent's own copy, which then takes its place.") : null,
        h("div.ws-content", isMd && !this.showSource ? markdown(f.content) : h("pre.ws-text", String(f.content || " "))),
      ),
    );
  }

  draftOfferFor(f) {
    const draft = this.takeDraft();
    return draft && !draft.isNew && draft.path === f.path && !f.truncated ? this.draftOffer(draft) : null;
  }

  /** Unsaved text left behind (the page reloaded, or Back left the view): restore it into the editor, or drop it. */
  draftOffer(draft) {
    const restore = h("button.primary.small", { type: "button" }, "Restore them");
    const drop = h("button.small", { type: "button" }, "Discard them");
    const note = h(
      "div.ws-note.ws-draft",
      { role: "note" },
      h("span", `You left unsaved changes to ${draft.path} (${formatTime(draft.at)}).`),
      h("span.row", restore, drop),
    );
    restore.addEventListener("click", () => {
      this.dropDraft();
      const base = draft.isNew ? "" : this.file.content;
      if (draft.isNew) this.renderCrumbs(parentDir(draft.path), `New: ${baseName(draft.path)}`);
      this.openEditor({ path: draft.path, base, etag: draft.etag, isNew: draft.isNew });
      this.edit.textarea.value = draft.text;
      this.markDirty();
    });
    drop.addEventListener("click", () => {
      this.dropDraft();
      note.remove();
    });
    return note;
  }

  toggleSource() {
    this.showSource = !this.showSource;
    this.renderFile();
  }

  // --- editing -------------------------------------------------------------------------------------------------

  startEdit() {
    const f = this.file;
    if (!f || f.truncated) return;
    this.openEditor({ path: f.path, base: f.content, etag: f.etag ?? null, isNew: false });
  }

  async askNewFile() {
    if (this.dirty() && !(await this.confirmDiscard())) return;
    const dir = this.path.endsWith("/") || !this.path ? this.path : parentDir(this.path);
    const input = h("input", { type: "text", name: "path", value: dir, required: true, spellcheck: "false", autocomplete: "off" });
    const problem = h("p.error", { role: "alert", hidden: true });
    const body = [field("File path", input, "Inside the workspace, e.g. notes/todo.md; missing folders are created."), problem];
    const ok = await dialog("New file", body, [{ label: "Cancel", value: false }, { label: "Create", value: true, kind: "primary" }], (value) => {
      if (!value) return true;
      const msg = badPath(input.value.trim());
      problem.hidden = !msg;
      problem.textContent = msg || "";
      return !msg;
    });
    if (!ok) return;
    const path = input.value.trim();
    this.renderCrumbs(parentDir(path), `New: ${baseName(path)}`);
    this.openEditor({ path, base: "", etag: null, isNew: true });
  }

  openEditor({ path, base, etag, isNew }) {
    this.seq += 1; // a load still under way (a Refresh, a reconnect) must not replace the editor when it answers
    this.busy(false);
    const textarea = h("textarea.code.ws-editor", { "aria-label": `Content of ${path}`, spellcheck: "false", rows: 22, value: base });
    this.edit = { path, base, etag, isNew, textarea, conflict: null, saving: false };
    textarea.addEventListener("input", () => this.markDirty());
    this.renderEditor();
    textarea.focus();
    textarea.setSelectionRange(0, 0);
  }

  renderEditor() {
    const e = this.edit;
    e.saveButton = h("button.primary", { type: "button", onclick: () => this.save() }, "Save");
    e.cancelButton = h("button", { type: "button", onclick: () => this.cancelEdit() }, "Cancel");
    e.state = h("span.ws-dirty", { role: "status" });
    const panes = h("div.ws-panes", h("div.ws-pane.mine", e.conflict ? h("h3", "Your version (not saved)") : null, e.textarea), e.conflict ? this.theirsPane(e.conflict) : null);
    fill(
      this.body,
      h(
        "section.card.ws-file.editing",
        { "aria-label": `${e.isNew ? "New file" : "Editing"} ${e.path}` },
        h("div.ws-file-head", h("h2", `${e.isNew ? "New file" : "Editing"} ${baseName(e.path)}`), e.state, h("div.ws-actions", e.saveButton, e.cancelButton)),
        e.conflict ? this.conflictNotice(e.conflict) : null,
        panes,
        h("p.hint", "Ctrl+S (⌘S) saves. ", e.isNew ? `Creates ${e.path}.` : null),
      ),
    );
    this.markDirty();
    this.setSaving(e.saving);
  }

  markDirty() {
    if (this.edit?.state) this.edit.state.textContent = this.dirty() ? "Unsaved changes" : "";
  }

  setSaving(on) {
    const e = this.edit;
    e.saving = on;
    for (const b of [e.saveButton, e.cancelButton, ...(e.conflictButtons || [])]) if (b) b.disabled = on;
    e.saveButton.textContent = on ? "Saving…" : "Save";
  }

  async cancelEdit() {
    if (this.dirty() && !(await this.confirmDiscard())) return;
    const wasNew = this.edit?.isNew;
    this.edit = null;
    this.dropDraft();
    if (wasNew || !this.file) this.reload();
    else {
      this.renderCrumbs(this.file.path);
      this.renderFile();
    }
  }

  /** Save, guarded by the version the edit started from; `force` writes whatever is there now. */
  async save({ force = false } = {}) {
    const e = this.edit;
    if (!e || e.saving) return;
    const params = { path: e.path, content: e.textarea.value };
    if (!force && e.isNew) params.ifNoneMatch = "*";
    else if (!force && e.etag) params.ifMatch = e.etag;
    this.setSaving(true);
    try {
      await this.gw.call("workspace.write", params);
      if (this.edit !== e) return;
      this.edit = null;
      if (this.takeDraft()?.path === e.path) this.dropDraft();
      toast(`Saved ${e.path}.`, "ok");
      if (this.path === e.path) this.reload();
      else this.navigate("workspace", ...e.path.split("/"));
    } catch (err) {
      if (this.edit !== e) return;
      this.setSaving(false);
      if (err.code === 409) await this.showConflict(e, err);
      else failed(`Saving ${e.path}`, err);
    }
  }

  // --- conflicts -----------------------------------------------------------------------------------------------

  async showConflict(e, err) {
    let theirs = null;
    try {
      theirs = await this.gw.call("workspace.read", { path: e.path });
    } catch (readErr) {
      if (readErr.code !== 404) failed(`Reading the saved ${e.path}`, readErr);
    }
    if (this.edit !== e) return;
    e.conflict = { message: err.message, theirs };
    this.renderEditor();
  }

  conflictNotice(c) {
    const e = this.edit;
    const reload = h("button", { type: "button", onclick: () => this.takeTheirs() }, c.theirs ? "Reload theirs" : "Discard mine");
    const overwrite = h("button.danger", { type: "button", onclick: () => this.save({ force: true }) }, "Overwrite");
    e.conflictButtons = [reload, overwrite];
    const what = c.theirs
      ? "Someone changed this file after you opened it. Your text is kept below, beside theirs."
      : e.isNew
        ? "A file with this name already exists."
        : "This file was deleted after you opened it. Your text is kept below.";
    return h(
      "div.ws-conflict",
      { role: "alert" },
      h("p", h("strong", "Conflict: "), what),
      h("p.hint", `The gateway said: ${c.message}`),
      h("div.row", reload, h("span.hint", "discards your changes"), overwrite, h("span.hint", c.theirs ? "replaces theirs with yours" : "saves yours")),
    );
  }

  theirsPane(c) {
    if (!c.theirs) return h("div.ws-pane.theirs", h("h3", "Their version"), empty("Deleted."));
    const when = c.theirs.lastModified ? ` (saved ${formatTime(Date.parse(c.theirs.lastModified))})` : "";
    return h(
      "div.ws-pane.theirs",
      h("h3", `Their version${when}`),
      h("pre.ws-text.ws-theirs", { tabindex: "0", "aria-label": "Their version" }, c.theirs.content || " "),
      c.theirs.truncated ? h("p.hint", "Only the first part of their version is shown.") : null,
    );
  }

  takeTheirs() {
    const e = this.edit;
    const theirs = e?.conflict?.theirs;
    this.edit = null;
    if (theirs && !e.isNew && !theirs.truncated) {
      this.file = theirs;
      this.renderCrumbs(theirs.path);
      this.renderFile();
    } else if (theirs) {
      this.navigate("workspace", ...e.path.split("/"));
    } else {
      this.reload();
    }
  }

  // --- deleting ------------------------------------------------------------------------------------------------

  async remove(path, button) {
    if (!(await confirmAction("Delete file", `Delete ${path}? This cannot be undone.`))) return;
    button.disabled = true;
    try {
      await this.gw.call("workspace.delete", { path });
      toast(`Deleted ${path}.`, "ok");
      if (this.path === path) this.navigate("workspace", ...parentDir(path).split("/"));
      else this.reload();
    } catch (err) {
      failed(`Deleting ${path}`, err);
      button.disabled = false;
    }
  }

  busy(on) {
    this.body.setAttribute("aria-busy", String(on));
    this.refreshButton.disabled = on;
    if (on && !this.body.childElementCount) this.body.append(h("p.muted", "Loading…"));
  }
}

// Schedules: the gateway's cron jobs and heartbeats.
//
// The list (#/schedules) shows the scheduler's summary (cron.status), every job (cron.list) with its schedule in
// words, whether it is enabled, its next run and last outcome, with actions: enable/disable (cron.update
// patch {enabled}), run now (cron.run mode "force"), edit, delete (cron.remove); and the heartbeats
// (heartbeat.status, heartbeat.start, heartbeat.trigger). A job's page (#/schedules/job/<id>) adds its run history
// (cron.runs). The editor (#/schedules/new, #/schedules/edit/<id>) builds the schedule (at / every / cron), the
// spec (task or system event) and previews the next runs as it is typed (cron.preview); it saves with cron.add or
// cron.update and shows the gateway's validation message beside the form, keeping what was typed.
// There are no cron events: what is shown is reloaded every 30 s, every 3 s while a job runs, and on reconnect.
// A job form with unsaved changes asks before the address leaves it (the shell's `canLeave`) or the page closes.

import { busy, clip, confirmAction, debounce, failed, field, fill, formatDuration, h, header, icon, rerender, toast } from "../ui.js";

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
const WEEK = 7 * DAY;
const UNITS = [
  { id: "weeks", ms: WEEK, word: "week" },
  { id: "days", ms: DAY, word: "day" },
  { id: "hours", ms: HOUR, word: "hour" },
  { id: "minutes", ms: MINUTE, word: "minute" },
  { id: "seconds", ms: SECOND, word: "second" },
];
const PRESETS = [
  { label: "Every 15 minutes", expr: "*/15 * * * *" },
  { label: "Hourly, on the hour", expr: "0 * * * *" },
  { label: "Every day at 09:00", expr: "0 9 * * *" },
  { label: "Weekdays at 09:00", expr: "0 9 * * 1-5" },
  { label: "Every Monday at 09:00", expr: "0 9 * * 1" },
  { label: "First of the month at 09:00", expr: "0 9 1 * *" },
];
const THINKING = ["off", "minimal", "low", "medium", "high", "xhigh"];
const TASK_OPTIONS = ["channel", "to", "model", "thinking", "timeoutSeconds"];
const DAY_NAMES = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const FAST_POLL_MS = 3000;
const SLOW_POLL_MS = 30000;
const HISTORY_CATCH_UP_MS = 120000; // how long after a run's end its missing history entry is still waited for
const READ_MS = 15000;
const HISTORY_PAGE = 50;
const HISTORY_MAX = 2000; // the most runs cron.runs gives at once
const BROWSER_TZ = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";

// --- time and words ----------------------------------------------------------------------------------------------

const pad = (n) => String(n).padStart(2, "0");

/** A date and time in full, in this browser's zone (or `timeZone`). */
function when(ms, timeZone) {
  /** @type {Intl.DateTimeFormatOptions} */
  const options = { weekday: "short", year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" };
  if (timeZone) options.timeZone = timeZone;
  try {
    return new Date(ms).toLocaleString(undefined, options);
  } catch {
    return new Date(ms).toLocaleString(undefined, { ...options, timeZone: undefined });
  }
}

/** "in 5 minutes", "3 hours ago". */
function relative(ms, now = Date.now()) {
  const diff = ms - now;
  const abs = Math.abs(diff);
  if (abs < MINUTE) return diff >= 0 ? "in less than a minute" : "just now";
  const rtf = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  if (Math.round(abs / MINUTE) < 60) return rtf.format(Math.round(diff / MINUTE), "minute");
  if (abs < DAY) return rtf.format(Math.round(diff / HOUR), "hour");
  return rtf.format(Math.round(diff / DAY), "day");
}

/** A time as a <time> element (machine-readable), with how far off it is under it. */
function moment(ms, { ago = true } = {}) {
  if (ms === null || ms === undefined) return h("span.muted", "—");
  return h(
    "span.moment",
    h("time", { datetime: new Date(ms).toISOString() }, when(ms)),
    ago ? h("small.muted", relative(ms)) : null,
  );
}

/** `datetime-local` value ⇄ epoch ms, in this browser's zone. */
function toLocalInput(ms) {
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}
function fromLocalInput(value) {
  const ms = value ? new Date(value).getTime() : NaN;
  return Number.isFinite(ms) ? ms : null;
}

function listWords(items) {
  return items.length < 2 ? items.join("") : `${items.slice(0, -1).join(", ")} and ${items[items.length - 1]}`;
}

function describeEvery(everyMs) {
  for (const unit of UNITS) {
    if (everyMs % unit.ms === 0) {
      const n = everyMs / unit.ms;
      return n === 1 ? `Every ${unit.word}` : `Every ${n} ${unit.word}s`;
    }
  }
  return `Every ${formatDuration(everyMs)}`;
}

/** The days a day-of-week field names, or null when it is not a simple one. */
function describeDays(dow) {
  if (dow === "*") return "Every day";
  if (dow === "1-5") return "Weekdays";
  if (["0,6", "6,0", "6,7", "6-7"].includes(dow)) return "Weekends";
  const range = dow.match(/^([0-7])-([0-7])$/);
  if (range) return `${DAY_NAMES[range[1] % 7]} to ${DAY_NAMES[range[2] % 7]}`;
  if (/^[0-7](,[0-7])*$/.test(dow)) return `Every ${listWords(dow.split(",").map((d) => DAY_NAMES[d % 7]))}`;
  return null;
}

/** A five-field cron expression in words, or null for anything but the common shapes. */
export function describeCron(expr) {
  const fields = String(expr || "").trim().split(/\s+/);
  if (fields.length !== 5 || fields[3] !== "*") return null;
  const [minute, hour, dom, , dow] = fields;
  const single = (s) => (/^\d{1,2}$/.test(s) ? Number(s) : null);
  const step = (s, whole) => {
    const m = s.match(/^\*\/(\d+)$/);
    return m && Number(m[1]) > 0 && whole % Number(m[1]) === 0 ? Number(m[1]) : null;
  };
  const m = single(minute);
  if (m !== null && m < 60 && /^\d{1,2}(,\d{1,2})*$/.test(hour)) {
    const hours = hour.split(",").map(Number);
    if (hours.some((x) => x > 23)) return null;
    const at = listWords(hours.map((x) => `${pad(x)}:${pad(m)}`));
    if (dom === "*" && describeDays(dow)) return `${describeDays(dow)} at ${at}`;
    const day = single(dom);
    if (dow === "*" && day !== null && day >= 1 && day <= 31) return `Monthly on day ${day} at ${at}`;
    return null;
  }
  if (dom !== "*" || dow !== "*") return null;
  if (minute === "*" && hour === "*") return "Every minute";
  if (step(minute, 60) && hour === "*") return `Every ${step(minute, 60)} minutes`;
  if (m !== null && m < 60 && hour === "*") return m === 0 ? "Hourly, on the hour" : `Hourly at ${pad(m)} past`;
  if (m !== null && m < 60 && step(hour, 24)) return `Every ${step(hour, 24)} hours at ${pad(m)} past`;
  return null;
}

/** A stored schedule in words: `{text, detail}` (detail: a node, or null). */
function describeSchedule(schedule) {
  const s = schedule || {};
  if (s.kind === "at") return { text: `Once, ${when(s.atMs)}`, detail: null };
  if (s.kind === "every") {
    return { text: describeEvery(s.everyMs), detail: s.anchorMs != null ? h("span", `counted from ${when(s.anchorMs)}`) : null };
  }
  if (s.kind === "cron") {
    return { text: describeCron(s.expr) || "Custom cron schedule", detail: h("span", h("code", String(s.expr || "")), ` · ${s.tz || "UTC"}`) };
  }
  return { text: `Unknown schedule (${s.kind})`, detail: null };
}

/** What a job does, in a line. */
function describeSpec(spec) {
  const s = spec || {};
  if (s.mode === "systemEvent") return { kind: "Event to the main session", text: String(s.text || "") };
  if (s.mode === "task") return { kind: "Task in its own session", text: String(s.message || "") };
  return { kind: `Unknown mode (${s.mode})`, text: "" };
}

function deliveryWords(spec) {
  if (!spec || spec.mode !== "task") return null;
  if (spec.deliver === false) return "The reply is not delivered.";
  if (spec.to) return `The reply goes to ${spec.channel ? `${spec.channel}:` : ""}${spec.to}.`;
  return "The reply goes where the agent was last talked to, if anywhere.";
}

/** A table cell labelled for the stacked (phone) layout; its content in one box. */
function cell(label, ...content) {
  return h("td", { dataset: { label } }, h("div.cell", content));
}

function outcome(status) {
  const kind = { ok: "ok", error: "error", skipped: "warn" }[status] || "";
  return h(`span.badge${kind ? `.${kind}` : ""}`, status || "—");
}

// --- gateway reads -----------------------------------------------------------------------------------------------

/** Every job, page after page. */
async function loadJobs(gw) {
  const jobs = [];
  let count = 0;
  for (let offset = 0; jobs.length < 5000; ) {
    const page = await gw.call("cron.list", { includeDisabled: true, limit: 500, offset }, { timeoutMs: READ_MS });
    count = page.count;
    jobs.push(...page.jobs);
    offset += page.jobs.length;
    if (!page.jobs.length || offset >= page.count) break;
  }
  return { jobs, count };
}

async function loadJob(gw, id) {
  const { jobs } = await loadJobs(gw);
  return jobs.find((j) => j.id === id) || null;
}

/**
 * A job's newest `limit` runs. A page the gateway cut short (`truncated`: it did not fit one message) is followed by
 * the next one from where it ended; `stuck` when a page came back empty though cut (a run too large for a message).
 */
async function loadRuns(gw, jobId, limit) {
  const runs = [];
  let count = 0;
  let stuck = false;
  while (runs.length < limit) {
    const page = await gw.call("cron.runs", { jobId, limit: limit - runs.length, offset: runs.length }, { timeoutMs: READ_MS });
    count = page.count;
    runs.push(...page.runs);
    if (!page.truncated || runs.length >= count) break;
    if (!page.runs.length) {
      stuck = true;
      break;
    }
  }
  return { runs, count, stuck };
}

/**
 * Whether a run that has just ended is not in the history read with the job yet: the gateway records the job's
 * last run before it adds the run to the history, and the two are read side by side. A while after the run's end
 * (clocks differ), a run missing from the history is taken as not recorded at all, and not waited for.
 */
function historyBehind(job, runs) {
  const state = job.state || {};
  if (state.lastRunAtMs == null) return false;
  const ended = Number(state.lastRunAtMs) + Number(state.lastDurationMs || 0);
  if (Math.abs(Date.now() - ended) > HISTORY_CATCH_UP_MS) return false;
  return !runs.runs.some((run) => run.ts === state.lastRunAtMs);
}

/**
 * Call `load` now and again after the delay (ms) it returns, or never again when it returns null. One load at a
 * time: a refresh asked for meanwhile runs right after it, so what an action changed is always shown.
 */
function poller(load) {
  let timer = null;
  let running = null;
  let again = false;
  let stopped = false;
  async function tick() {
    if (stopped) return;
    if (running) {
      again = true;
      return running;
    }
    clearTimeout(timer);
    running = load().catch(() => SLOW_POLL_MS);
    const delay = await running;
    running = null;
    if (stopped) return;
    if (again) {
      again = false;
      return tick();
    }
    if (delay) timer = setTimeout(tick, delay);
  }
  return {
    refresh: tick,
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

// --- job actions (list and job page) -------------------------------------------------------------------------------

/** The enabled switch of a job; `changed(job)` gets the job as saved. */
function enabledSwitch(view, job, changed) {
  const input = h("input", { type: "checkbox", role: "switch", checked: job.enabled, dataset: { key: `${job.id}:enabled` }, "aria-label": `Enabled: ${job.name}` });
  // busy: further clicks are refused (not `disabled`, which would take the keyboard focus away)
  input.addEventListener("click", (ev) => {
    if (input.getAttribute("aria-busy")) ev.preventDefault();
  });
  input.addEventListener("change", async () => {
    const wanted = input.checked;
    input.setAttribute("aria-busy", "true");
    try {
      const res = await view.gw.call("cron.update", { id: job.id, patch: { enabled: wanted } });
      toast(`“${job.name}” ${wanted ? "enabled" : "disabled"}.`, "ok");
      changed(res.job);
    } catch (err) {
      input.checked = !wanted;
      failed(wanted ? "Enabling the job" : "Disabling the job", err);
    } finally {
      input.removeAttribute("aria-busy");
    }
  });
  return h("label.check.switch", input, h("span", "Enabled"));
}

/** The key of the session a run started in, read from the gateway's "running in <key>" summary. */
function startedSession(result) {
  const m = /^running in (\S+)/.exec((result && result.summary) || "");
  return m ? m[1] : null;
}

async function runNow(view, job, button, report) {
  const done = busy(button, "Starting…");
  try {
    const res = await view.gw.call("cron.run", { id: job.id, mode: "force" });
    const result = (res.results || [])[0] || { status: "skipped", error: "nothing ran" };
    if (result.status === "ok") toast(`Started “${job.name}”. Its outcome shows in its history when it ends.`, "ok");
    else if (result.status === "error") toast(`“${job.name}” failed: ${result.error || "no reason given"}`, "error");
    else toast(`“${job.name}” was skipped: ${result.error || "no reason given"}`, "info");
    report?.(result);
  } catch (err) {
    failed("Running the job", err);
  } finally {
    done();
  }
}

async function removeJob(view, job, button, removed) {
  const sure = await confirmAction("Delete job", `Delete “${job.name}” and its run history? This cannot be undone.`);
  if (!sure) return;
  const done = busy(button, "Deleting…");
  try {
    const res = await view.gw.call("cron.remove", { id: job.id });
    toast(res.removed ? `Deleted “${job.name}”.` : `“${job.name}” was already gone.`, "ok");
    removed();
  } catch (err) {
    failed("Deleting the job", err);
    done();
  }
}

function actionButtons(view, job, { refresh, onRemoved, report }) {
  const run = h("button.small", { type: "button", dataset: { key: `${job.id}:run` }, "aria-label": `Run now: ${job.name}` }, "Run now");
  run.addEventListener("click", () => runNow(view, job, run, report).then(refresh));
  const edit = h("button.small", { type: "button", dataset: { key: `${job.id}:edit` }, "aria-label": `Edit: ${job.name}` }, "Edit");
  edit.addEventListener("click", () => {
    view.back = view.current;
    view.navigate("schedules", "edit", job.id);
  });
  const del = h("button.small.danger", { type: "button", dataset: { key: `${job.id}:delete` }, "aria-label": `Delete: ${job.name}` }, "Delete");
  del.addEventListener("click", () => removeJob(view, job, del, onRemoved));
  return [run, edit, del];
}

// --- the list ----------------------------------------------------------------------------------------------------

function summary(status) {
  if (!status) return null;
  const parts = [
    status.enabled ? h("span.badge.ok", "Scheduler on") : h("span.badge.warn", "Scheduler off"),
    h("span", `${status.count} ${status.count === 1 ? "job" : "jobs"} (at most ${status.maxJobs})`),
    status.dueCount ? h("span", `${status.dueCount} due`) : null,
    status.runningCount ? h("span", `${status.runningCount} running`) : null,
    status.nextRunAtMs != null ? h("span", "Next run ", h("time", { datetime: new Date(status.nextRunAtMs).toISOString() }, when(status.nextRunAtMs))) : null,
  ];
  const note = status.enabled ? null : h("p.hint", "The scheduler is off (setting cron.enabled): jobs run only when you run them now.");
  return [h("div.sched-summary.row", parts), note];
}

function nextRunCell(job) {
  const state = job.state || {};
  if (state.runningAtMs != null) return h("span.moment", h("span.badge.running", "running"), h("small.muted", `since ${when(state.runningAtMs)}`));
  if (!job.enabled) return h("span.muted", "— (disabled)");
  if (state.nextRunAtMs == null) return h("span.muted", "No upcoming run");
  return moment(state.nextRunAtMs);
}

function lastRunCell(job, errorChars = 400) {
  const state = job.state || {};
  if (state.lastRunAtMs == null) return h("span.muted", "Never run");
  const [error, cut] = clip(state.lastError || "", errorChars);
  return h(
    "span.moment",
    h("span.row", outcome(state.lastStatus), h("time", { datetime: new Date(state.lastRunAtMs).toISOString() }, when(state.lastRunAtMs))),
    state.lastDurationMs != null ? h("small.muted", `took ${formatDuration(state.lastDurationMs)}`) : null,
    error ? h("small.error", { title: state.lastError }, cut ? `${error}…` : error) : null,
  );
}

function jobRow(view, job, actions) {
  const sched = describeSchedule(job.schedule);
  const spec = describeSpec(job.spec);
  return h(
    "tr",
    { dataset: { job: job.id } },
    cell(
      "Job",
      h("a.job-name", { href: `#/schedules/job/${encodeURIComponent(job.id)}`, dataset: { key: `${job.id}:open` } }, job.name),
      job.description ? h("small.muted.block", String(job.description)) : null,
      h("small.muted.block", spec.kind, job.agentId && job.agentId !== "main" ? ` · agent ${job.agentId}` : ""),
    ),
    cell("Schedule", h("span", sched.text), sched.detail ? h("small.muted.block", sched.detail) : null),
    cell("Enabled", enabledSwitch(view, job, actions.refresh)),
    cell("Next run", nextRunCell(job)),
    cell("Last run", lastRunCell(job, 90)),
    h("td.actions", { dataset: { label: "Actions" } }, h("div.cell.row", actionButtons(view, job, actions))),
  );
}

function jobsTable(view, jobs, actions) {
  if (!jobs.length) {
    return h(
      "div.empty-state",
      h("p.empty", "No scheduled jobs yet."),
      h("p.hint", "A job runs a task for an agent, or sends an event to its main session, once, at an interval or on a cron schedule."),
    );
  }
  const head = ["Job", "Schedule", "Enabled", "Next run", "Last run", "Actions"];
  return h(
    "div.table-wrap",
    h("table.stack.jobs", h("thead", h("tr", head.map((t) => h("th", { scope: "col" }, t)))), h("tbody", jobs.map((j) => jobRow(view, j, actions)))),
  );
}

function listScreen(root, view) {
  const newJob = h("button.primary", { type: "button" }, icon("plus"), " New job");
  newJob.addEventListener("click", () => {
    view.back = view.current;
    view.navigate("schedules", "new");
  });
  const reload = h("button", { type: "button" }, icon("refresh"), " Refresh");
  const summaryBox = h("div.sched-head");
  const problem = h("p.error", { role: "alert", hidden: true });
  const jobsBox = h("div", h("p.muted", "Loading jobs…"));
  const heartbeat = heartbeatPanel(view);
  fill(
    root,
    header("Schedules", newJob, reload),
    summaryBox,
    h("section.card", { "aria-labelledby": "sched-jobs-title" }, h("h2#sched-jobs-title", "Cron jobs"), problem, jobsBox),
    heartbeat.el,
  );

  let loaded = false;
  const poll = poller(async () => {
    const [status, list] = await Promise.allSettled([view.gw.call("cron.status", undefined, { timeoutMs: READ_MS }), loadJobs(view.gw)]);
    if (status.status === "fulfilled") fill(summaryBox, summary(status.value));
    if (list.status === "rejected") {
      problem.hidden = false;
      problem.textContent = `Could not load the jobs: ${list.reason?.message || list.reason}`;
      if (!loaded) fill(jobsBox);
      return SLOW_POLL_MS;
    }
    problem.hidden = true;
    loaded = true;
    const jobs = list.value.jobs;
    rerender(jobsBox, jobsTable(view, jobs, { refresh: () => poll.refresh(), onRemoved: () => poll.refresh() }));
    return jobs.some((j) => j.state?.runningAtMs != null) ? FAST_POLL_MS : SLOW_POLL_MS;
  });
  reload.addEventListener("click", async () => {
    const done = busy(reload);
    await Promise.all([poll.refresh(), heartbeat.refresh()]);
    done();
  });
  poll.refresh();
  heartbeat.refresh();
  return {
    refresh: () => Promise.all([poll.refresh(), heartbeat.refresh()]),
    destroy: () => poll.stop(),
  };
}

// --- heartbeats --------------------------------------------------------------------------------------------------

function heartbeatRows(agents) {
  return Object.values(agents).map((a) => {
    const active = a.lastActive;
    const [text, cut] = clip(a.lastHeartbeatText || "", 200);
    return h(
      "tr",
      cell("Agent", h("strong", String(a.agentId))),
      cell("Next", a.nextHeartbeatAt != null ? moment(a.nextHeartbeatAt) : h("span.muted", "Not scheduled")),
      cell("Last", moment(a.lastHeartbeatAt)),
      cell("Last reply", text ? h("span.clip", { title: a.lastHeartbeatText }, cut ? `${text}…` : text) : h("span.muted", "—")),
      cell("Last delivered", moment(a.lastHeartbeatSentAt)),
      cell("Last talked to", active && active.channel ? `${active.channel}${active.peer?.id ? `: ${active.peer.id}` : ""}` : h("span.muted", "—")),
    );
  });
}

function heartbeatPanel(view) {
  const table = h("div", h("p.muted", "Loading heartbeats…"));
  const result = h("div.hb-result", { role: "status" });
  const agentList = h("datalist#hb-agents");
  const agent = h("input", { type: "text", value: "main", list: "hb-agents", autocomplete: "off", spellcheck: "false", size: 12 });
  const start = h("button", { type: "button" }, "Start schedule");
  const trigger = h("button.primary", { type: "button" }, "Trigger now");
  const el = h(
    "section.card.heartbeat",
    { "aria-labelledby": "hb-title" },
    h("h2#hb-title", "Heartbeat"),
    h("p.hint", "Each agent's periodic check-in. Starting the schedule makes every configured agent due one interval from now; triggering runs one agent's heartbeat at once."),
    table,
    h("div.hb-actions", start, h("div.hb-trigger", field("Agent", agent), trigger), agentList),
    result,
  );

  const show = (agents) => {
    const ids = Object.keys(agents || {});
    fill(agentList, [...new Set(["main", ...ids])].map((id) => h("option", { value: id })));
    if (!ids.length) {
      fill(table, h("p.empty", "No heartbeat state yet: start the schedule to plan each agent's next heartbeat."));
      return;
    }
    const head = ["Agent", "Next", "Last", "Last reply", "Last delivered", "Last talked to"];
    fill(table, h("div.table-wrap", h("table.stack.agents", h("thead", h("tr", head.map((t) => h("th", { scope: "col" }, t)))), h("tbody", heartbeatRows(agents)))));
  };
  const say = (text, kind, extra = null) => fill(result, h(`p.${kind}`, String(text ?? "")), extra);

  async function refresh() {
    try {
      const res = await view.gw.call("heartbeat.status", undefined, { timeoutMs: READ_MS });
      show(res.agents);
    } catch (err) {
      fill(table, h("p.error", `Could not load the heartbeats: ${err.message}`));
    }
  }
  start.addEventListener("click", async () => {
    const done = busy(start, "Starting…");
    try {
      const res = await view.gw.call("heartbeat.start");
      show(res.agents);
      say(res.message, "ok");
    } catch (err) {
      failed("Starting the heartbeat", err);
    } finally {
      done();
    }
  });
  trigger.addEventListener("click", async () => {
    const agentId = agent.value.trim() || "main";
    const done = busy(trigger, "Triggering…");
    try {
      const res = await view.gw.call("heartbeat.trigger", { agentId });
      if (res.ok && !res.skipped) {
        const key = `agent:${agentId}:heartbeat:system:internal`;
        say(res.message, "ok", h("a", { href: `#/chat/${encodeURIComponent(key)}` }, "Open the heartbeat session"));
      } else {
        say(res.skipped ? `Skipped: ${res.skipReason || res.message}` : res.message, res.skipped ? "warn" : "error");
      }
      await refresh();
    } catch (err) {
      failed("Triggering the heartbeat", err);
    } finally {
      done();
    }
  });
  return { el, refresh };
}

// --- a job's page --------------------------------------------------------------------------------------------------

function facts(job) {
  const sched = describeSchedule(job.schedule);
  const spec = describeSpec(job.spec);
  const s = job.spec || {};
  const options = [
    s.model ? `model ${s.model}` : null,
    s.thinking ? `thinking ${s.thinking}` : null,
    typeof s.timeoutSeconds === "number" ? `time limit ${s.timeoutSeconds} s` : null,
  ].filter(Boolean);
  const row = (term, ...def) => [h("dt", term), h("dd", def)];
  return h(
    "dl.facts",
    row("Schedule", sched.text, sched.detail ? h("small.muted.block", sched.detail) : null),
    row("Does", h("span", spec.kind), h("div.spec-text", spec.text), h("small.muted.block", [deliveryWords(s), options.length ? ` ${options.join(", ")}.` : null])),
    row("Agent", job.agentId || "main"),
    job.description ? row("Description", job.description) : null,
    row("Next run", nextRunCell(job)),
    row("Last run", lastRunCell(job)),
    job.deleteAfterRun ? row("After it runs", "Deleted once it has run successfully") : null,
    row("Created", moment(job.createdAtMs, { ago: false })),
    row("Changed", moment(job.updatedAtMs, { ago: false })),
  );
}

function runRows(runs, sessions) {
  return runs.map((run) => {
    const [text, cut] = clip(run.error || run.summary || "", 400);
    return h(
      "tr",
      cell("Started", moment(run.ts)),
      cell("Outcome", outcome(run.status)),
      cell("Took", run.durationMs != null ? formatDuration(run.durationMs) : "—"),
      cell("Details", text ? h(run.error ? "span.error.clip" : "span.clip", { title: run.error || run.summary }, cut ? `${text}…` : text) : h("span.muted", "—")),
      sessions ? cell("Session", run.sessionKey ? h("a", { href: `#/chat/${encodeURIComponent(run.sessionKey)}` }, "Open session") : h("span.muted", "—")) : null,
    );
  });
}

function historyTable(res) {
  if (!res.runs.length) return h("p.empty", "No runs yet. Runs show here once they end.");
  // the session a run went to, when the gateway's run records carry it
  const sessions = res.runs.some((r) => r.sessionKey);
  const head = ["Started", "Outcome", "Took", "Details", sessions ? "Session" : null].filter(Boolean);
  return h("div.table-wrap", h("table.stack.runs", h("thead", h("tr", head.map((t) => h("th", { scope: "col" }, t)))), h("tbody", runRows(res.runs, sessions))));
}

function jobScreen(root, view, id) {
  const title = h("h1", "Job");
  const actionsBox = h("div.view-actions");
  const body = h("div", h("p.muted", "Loading the job…"));
  const problem = h("p.error", { role: "alert", hidden: true });
  const started = h("div.run-note", { role: "status" });
  const historyBox = h("div", h("p.muted", "Loading its runs…"));
  const historyCount = h("span.muted.count");
  const more = h("button.small", { type: "button", hidden: true, dataset: { key: "older-runs" } }, "Show older runs");
  const tooLarge = h("p.hint", { hidden: true }, "Older runs are too large to show here.");
  const history = h(
    "section.card",
    { "aria-labelledby": "sched-runs-title", hidden: true },
    h("div.row", h("h2#sched-runs-title.grow", "Run history"), historyCount),
    historyBox,
    more,
    tooLarge,
  );
  fill(root, h("a.back", { href: "#/schedules" }, "← All schedules"), h("header.view-head", title, actionsBox), problem, body, started, history);

  let limit = HISTORY_PAGE;
  const report = (result) => {
    const key = result.status === "ok" ? startedSession(result) : null;
    fill(started, key ? h("p", "Started. ", h("a", { href: `#/chat/${encodeURIComponent(key)}` }, "Follow the run in its session")) : null);
  };
  const actions = { refresh: () => poll.refresh(), onRemoved: () => view.navigate("schedules"), report };
  const poll = poller(async () => {
    let job;
    let runs;
    try {
      [job, runs] = await Promise.all([loadJob(view.gw, id), loadRuns(view.gw, id, limit)]);
      problem.hidden = true;
    } catch (err) {
      problem.hidden = false;
      problem.textContent = `Could not load the job: ${err.message}`;
      return SLOW_POLL_MS;
    }
    if (!job) {
      title.textContent = "Job not found";
      fill(actionsBox);
      fill(body, h("p.empty", "This job does not exist (any more)."), h("p", h("a", { href: "#/schedules" }, "Back to the schedules")));
      history.hidden = true;
      return null;
    }
    title.textContent = job.name;
    rerender(actionsBox, [enabledSwitch(view, job, actions.refresh), ...actionButtons(view, job, actions)]);
    rerender(body, h("section.card", facts(job)));
    history.hidden = false;
    historyCount.textContent = runs.count ? `${runs.runs.length} of ${runs.count}` : "";
    const older = runs.runs.length < runs.count;
    more.hidden = !older || runs.stuck || limit >= HISTORY_MAX;
    tooLarge.hidden = !(older && runs.stuck);
    rerender(historyBox, historyTable(runs));
    return job.state?.runningAtMs != null || historyBehind(job, runs) ? FAST_POLL_MS : SLOW_POLL_MS;
  });
  more.addEventListener("click", async () => {
    const done = busy(more, "Loading…");
    limit = Math.min(limit + HISTORY_PAGE, HISTORY_MAX);
    await poll.refresh();
    done();
    if (more.hidden && document.activeElement === document.body) {
      // all runs are shown: no button any more, the keyboard goes on from the history's heading
      const heading = history.querySelector("h2");
      heading.setAttribute("tabindex", "-1");
      heading.focus();
    }
  });
  poll.refresh();
  return { refresh: () => poll.refresh(), destroy: () => poll.stop() };
}

// --- the editor --------------------------------------------------------------------------------------------------

let formCount = 0;

/** A group of radio buttons: `{el, value}` (value: the checked one's). */
function radios(name, legend, choices, value) {
  const inputs = choices.map(([v]) => h("input", { type: "radio", name, value: v, checked: v === value }));
  const labels = choices.map(([, text], i) => h("label.choice", inputs[i], h("span", text)));
  return {
    el: h("fieldset.choices", h("legend", legend), labels),
    get value() {
      return inputs.find((i) => i.checked)?.value;
    },
  };
}

/** The form's controls, filled from `job` (or a new job's defaults). */
function controls(job) {
  const n = ++formCount;
  const sched = job?.schedule || {};
  const spec = job?.spec || { mode: "task", deliver: true };
  const soon = Math.ceil((Date.now() + HOUR) / (5 * MINUTE)) * 5 * MINUTE;
  const every = sched.kind === "every" ? sched.everyMs : HOUR;
  const unit = UNITS.find((u) => every % u.ms === 0) || UNITS[UNITS.length - 1];
  const text = (attrs = {}) => h("input", { type: "text", autocomplete: "off", ...attrs });
  const c = {
    name: text({ value: job?.name || "", maxlength: 200, required: true }),
    description: text({ value: job?.description || "" }),
    agentId: text({ value: job?.agentId || "main", spellcheck: "false" }),
    enabled: h("input", { type: "checkbox", checked: job ? job.enabled : true }),
    kind: radios(`kind-${n}`, "Runs", [["at", "Once"], ["every", "At an interval"], ["cron", "On a cron schedule"]], sched.kind || "cron"),
    at: h("input", { type: "datetime-local", value: toLocalInput(sched.kind === "at" ? sched.atMs : soon) }),
    deleteAfterRun: h("input", { type: "checkbox", checked: Boolean(job?.deleteAfterRun) }),
    everyN: h("input", { type: "number", min: "0", step: "any", value: String(every / unit.ms), inputmode: "decimal" }),
    everyUnit: h("select", UNITS.map((u) => h("option", { value: u.id, selected: u === unit }, u.id))),
    anchor: h("input", { type: "datetime-local", value: sched.anchorMs != null ? toLocalInput(sched.anchorMs) : "" }),
    preset: h("select", h("option", { value: "" }, "Custom…"), PRESETS.map((p) => h("option", { value: p.expr }, p.label))),
    expr: text({ value: sched.kind === "cron" ? sched.expr : "0 9 * * *", spellcheck: "false", class: "mono" }),
    exprWords: h("small.hint.words", { "aria-live": "polite" }),
    tz: text({ value: sched.kind === "cron" ? sched.tz || "" : BROWSER_TZ, list: `tz-${n}`, spellcheck: "false", placeholder: "UTC" }),
    tzList: h(`datalist#tz-${n}`, ["UTC", ...(Intl.supportedValuesOf?.("timeZone") || [])].map((z) => h("option", { value: z }))),
    mode: radios(`mode-${n}`, "Does", [["task", "Runs a task in its own session"], ["systemEvent", "Sends an event to the agent's main session"]], spec.mode || "task"),
    message: h("textarea", { rows: 4, value: spec.mode === "task" ? spec.message || "" : "" }),
    text: h("textarea", { rows: 4, value: spec.mode === "systemEvent" ? spec.text || "" : "" }),
    deliver: h("input", { type: "checkbox", checked: spec.deliver !== false }),
    channel: text({ value: spec.channel || "", spellcheck: "false" }),
    to: text({ value: spec.to || "", spellcheck: "false" }),
    model: text({ value: spec.model || "", spellcheck: "false", placeholder: "provider/model-id" }),
    thinking: h("select", h("option", { value: "" }, "Agent's default"), THINKING.map((t) => h("option", { value: t, selected: spec.thinking === t }, t))),
    timeout: h("input", { type: "number", min: "1", step: "1", value: typeof spec.timeoutSeconds === "number" ? String(spec.timeoutSeconds) : "" }),
  };
  c.preset.value = PRESETS.some((p) => p.expr === c.expr.value.trim()) ? c.expr.value.trim() : "";
  return c;
}

/** The schedule the form describes: `{schedule}`, or `{problem, control}` for something to fix first. */
function readSchedule(c, job) {
  const kind = c.kind.value;
  const old = job?.schedule || {};
  if (kind === "at") {
    let atMs = fromLocalInput(c.at.value);
    if (atMs === null) return { problem: "Pick the date and time it runs.", control: c.at };
    if (old.kind === "at" && toLocalInput(old.atMs) === c.at.value) atMs = old.atMs; // unchanged: keep its seconds
    return { schedule: { kind: "at", atMs } };
  }
  if (kind === "every") {
    if (!c.everyN.value.trim()) return { problem: "Say how often it runs.", control: c.everyN };
    const unit = UNITS.find((u) => u.id === c.everyUnit.value) || UNITS[2];
    const schedule = { kind: "every", everyMs: Math.round(Number(c.everyN.value) * unit.ms) };
    if (c.anchor.value) {
      let anchorMs = fromLocalInput(c.anchor.value);
      if (anchorMs === null) return { problem: "The start time is not a valid date and time.", control: c.anchor };
      if (old.anchorMs != null && toLocalInput(old.anchorMs) === c.anchor.value) anchorMs = old.anchorMs;
      schedule.anchorMs = anchorMs;
    }
    return { schedule };
  }
  const schedule = { kind: "cron", expr: c.expr.value.trim() };
  if (c.tz.value.trim()) schedule.tz = c.tz.value.trim();
  return { schedule };
}

/** The spec the form describes; on an edit of the same mode, cleared options are sent as "" (a patch merges). */
function readSpec(c, job) {
  if (c.mode.value === "systemEvent") return { mode: "systemEvent", text: c.text.value };
  const spec = { mode: "task", message: c.message.value, deliver: c.deliver.checked };
  const given = {
    channel: c.channel.value.trim(),
    to: c.to.value.trim(),
    model: c.model.value.trim(),
    thinking: c.thinking.value,
    timeoutSeconds: c.timeout.value.trim() ? Number(c.timeout.value) : "",
  };
  const old = job?.spec?.mode === "task" ? job.spec : {};
  for (const key of TASK_OPTIONS) {
    if (given[key] !== "") spec[key] = given[key];
    else if (old[key] !== undefined && old[key] !== "") spec[key] = "";
  }
  return spec;
}

function previewList(runs, tz) {
  const other = tz && tz !== BROWSER_TZ ? tz : null;
  return h(
    "ol.next-runs",
    runs.map((ms) =>
      h("li", h("time", { datetime: new Date(ms).toISOString() }, when(ms)), other ? h("small.muted", ` (${when(ms, other)} in ${other})`) : null, h("small.muted", ` · ${relative(ms)}`)),
    ),
  );
}

/** The next-runs preview: asks the gateway (debounced) each time the schedule changes. */
function previewer(view, c, job, box) {
  let seq = 0;
  let stopped = false;
  const show = (...nodes) => fill(box, h("h3", "Next runs"), nodes);
  const ask = async () => {
    if (stopped) return;
    const mine = ++seq;
    const read = readSchedule(c, job);
    if (read.problem) return show(h("p.muted", read.problem));
    box.setAttribute("aria-busy", "true");
    try {
      const res = await view.gw.call("cron.preview", { schedule: read.schedule, count: 5 }, { timeoutMs: 10000 });
      if (mine !== seq) return;
      const runs = res.nextRunsMs || [];
      if (runs.length) show(previewList(runs, read.schedule.tz));
      else if (read.schedule.kind === "at") show(h("p.warn", "That time has passed: saved and enabled, the job runs once, right away."));
      else show(h("p.warn", "No run within the next year."));
    } catch (err) {
      if (mine !== seq) return;
      const text = err.code === 404 ? "This gateway cannot preview schedules." : err.message;
      show(h("p.error.preview-error", text));
    } finally {
      if (mine === seq) box.removeAttribute("aria-busy");
    }
  };
  const later = debounce(ask, 350);
  // the schedule changed: what is shown is out of date until the new answer (an answer on its way is dropped)
  const soon = () => {
    seq += 1;
    box.setAttribute("aria-busy", "true");
    later();
  };
  return {
    now: ask,
    soon,
    stop: () => {
      stopped = true;
      seq += 1;
    },
  };
}

function layout(c, previewBox) {
  const atPanel = h("div.kind-panel", { dataset: { kind: "at" } }, field("Date and time", c.at, `In this browser's time zone (${BROWSER_TZ}).`), h("label.check", c.deleteAfterRun, "Delete the job once it has run successfully"));
  const everyPanel = h(
    "div.kind-panel",
    { dataset: { kind: "every" } },
    h("div.pair", field("Every", c.everyN), field("Unit", c.everyUnit)),
    field("Counted from (optional)", c.anchor, "Runs fall on a grid from this time; without it, from when the job is saved."),
  );
  const cronPanel = h(
    "div.kind-panel",
    { dataset: { kind: "cron" } },
    field("Preset", c.preset),
    field("Cron expression", c.expr, "minute hour day-of-month month day-of-week, numbers only, e.g. 30 8 * * 1-5"),
    c.exprWords,
    field("Time zone", c.tz, "An IANA name such as Europe/Paris; empty means UTC."),
    c.tzList,
  );
  const taskPanel = h(
    "div.mode-panel",
    { dataset: { mode: "task" } },
    field("Message", c.message, "What the agent is asked, in a fresh session each run."),
    h("label.check", c.deliver, "Deliver the reply"),
    h(
      "details.options",
      h("summary", "More options"),
      h("div.grid2", field("Channel", c.channel, "Deliver on this channel (else the last active one)."), field("To", c.to, "A peer id on that channel.")),
      h("div.grid2", field("Model", c.model, "Overrides the agent's model for this job."), field("Thinking", c.thinking)),
      field("Time limit (seconds)", c.timeout, "A run still going after this is stopped."),
    ),
  );
  const eventPanel = h("div.mode-panel", { dataset: { mode: "systemEvent" } }, field("Text", c.text, "Injected into the agent's main session each run."));
  return {
    when: h("fieldset.card.part", h("legend", "When"), c.kind.el, atPanel, everyPanel, cronPanel, previewBox),
    what: h("fieldset.card.part", h("legend", "What it does"), c.mode.el, taskPanel, eventPanel),
    job: h(
      "fieldset.card.part",
      h("legend", "Job"),
      h("div.grid2", field("Name", c.name), field("Agent", c.agentId, "The agent that runs it.")),
      field("Description (optional)", c.description),
      h("label.check", c.enabled, "Enabled"),
    ),
  };
}

function editorForm(view, job, onSaved, onCancel) {
  const c = controls(job);
  let saved = false; // once saved (or given up), leaving does not ask
  const previewBox = h("div.preview", { "aria-live": "polite" });
  const parts = layout(c, previewBox);
  const error = h("p.form-error.error", { role: "alert", hidden: true });
  const save = h("button.primary", { type: "submit" }, job ? "Save changes" : "Create job");
  const cancel = h("button", { type: "button" }, "Cancel");
  cancel.addEventListener("click", onCancel);
  const form = h("form.job-form", { novalidate: true }, parts.job, parts.when, parts.what, h("div.form-foot", error, h("div.row", save, cancel)));
  const preview = previewer(view, c, job, previewBox);

  const sync = () => {
    for (const p of form.querySelectorAll(".kind-panel")) p.hidden = p.dataset.kind !== c.kind.value;
    for (const p of form.querySelectorAll(".mode-panel")) p.hidden = p.dataset.mode !== c.mode.value;
    const words = describeCron(c.expr.value);
    c.exprWords.textContent = words ? `Reads: ${words}` : "";
  };
  // runs before the fieldset's listeners below, which then preview the expression the preset wrote
  c.preset.addEventListener("change", () => {
    if (c.preset.value) c.expr.value = c.preset.value;
  });
  c.expr.addEventListener("input", () => {
    c.preset.value = PRESETS.some((p) => p.expr === c.expr.value.trim()) ? c.expr.value.trim() : "";
  });
  for (const type of ["input", "change"]) {
    parts.when.addEventListener(type, () => {
      sync();
      preview.soon();
    });
  }
  parts.what.addEventListener("change", sync);
  const showError = (text, control = null) => {
    error.hidden = false;
    error.textContent = text;
    control?.focus();
  };

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    error.hidden = true;
    const read = readSchedule(c, job);
    if (read.problem) return showError(read.problem, read.control);
    const fields = {
      name: c.name.value.trim(),
      description: c.description.value.trim(),
      agentId: c.agentId.value.trim() || "main",
      enabled: c.enabled.checked,
      deleteAfterRun: read.schedule.kind === "at" && c.deleteAfterRun.checked,
      schedule: read.schedule,
      spec: readSpec(c, job),
    };
    if (!job) {
      if (!fields.description) delete fields.description;
      if (!fields.deleteAfterRun) delete fields.deleteAfterRun;
    }
    const done = busy(save, "Saving…");
    try {
      const res = job ? await view.gw.call("cron.update", { id: job.id, patch: fields }) : await view.gw.call("cron.add", fields);
      toast(job ? `Saved “${res.job.name}”.` : `Created “${res.job.name}”.`, "ok");
      saved = true;
      onSaved(res.job);
    } catch (err) {
      showError(`${job ? "Saving" : "Creating"} the job failed: ${err.message}`);
    } finally {
      done();
    }
  });
  sync();
  preview.now();
  // unsaved changes: what the form holds differs from what it was filled with, and was not saved
  const snapshot = () => JSON.stringify([...form.elements].map((el) => (el.type === "checkbox" || el.type === "radio" ? el.checked : el.value)));
  const initial = snapshot();
  const dirty = () => !saved && snapshot() !== initial;
  return {
    el: form,
    refresh: () => preview.now(),
    stop: () => preview.stop(),
    dirty,
    saved: () => (saved = true),
  };
}

function editorScreen(root, view, id) {
  const back = view.back && view.back[0] === "job" ? ["job", view.back[1]] : [];
  const leave = () => view.navigate("schedules", ...back);
  const body = h("div", id ? h("p.muted", "Loading the job…") : null);
  fill(root, h("a.back", { href: `#/${["schedules", ...back.map(encodeURIComponent)].join("/")}` }, "← Back"), header(id ? "Edit job" : "New job"), body);
  let form = null;
  let alive = true;
  let asking = null; // the open "discard your changes?" question, if any
  const unload = (ev) => {
    if (form?.dirty()) {
      ev.preventDefault();
      ev.returnValue = "";
    }
  };
  window.addEventListener("beforeunload", unload);
  const build = (job) => {
    form = editorForm(view, job, () => view.navigate("schedules", ...back), leave);
    fill(body, form.el);
  };
  const load = async () => {
    if (!id) return build(null);
    try {
      const job = await loadJob(view.gw, id);
      if (!alive) return;
      if (job) build(job);
      else fill(body, h("p.empty", "This job does not exist (any more)."), h("p", h("a", { href: "#/schedules" }, "Back to the schedules")));
    } catch (err) {
      if (!alive) return;
      const retry = h("button", { type: "button", onclick: () => load() }, "Try again");
      fill(body, h("p.error", `Could not load the job: ${err.message}`), retry);
    }
  };
  load();
  return {
    // after a reconnect: a form being filled in is kept, only its preview is asked again
    refresh: () => (form ? form.refresh() : load()),
    // asked by the shell before the address changes: one question, however often it changes meanwhile
    canLeave: () => {
      if (!form?.dirty()) return true;
      asking ||= confirmAction("Discard your changes?", `The ${id ? "job's changes are" : "new job is"} not saved. Leave and lose ${id ? "them" : "it"}?`, "Discard changes").then((discard) => {
        asking = null;
        if (discard) form.saved(); // not asked again on the way out
        return discard;
      });
      return asking;
    },
    destroy: () => {
      alive = false;
      window.removeEventListener("beforeunload", unload);
      form?.stop();
    },
  };
}

// --- the view ----------------------------------------------------------------------------------------------------

export default {
  id: "schedules",
  title: "Schedules",
  icon: "schedules",
  mount(container, ctx) {
    const view = { gw: ctx.gw, navigate: ctx.navigate, back: null, current: [] };
    let screen = null;
    const show = (params, focus) => {
      screen?.destroy();
      container.replaceChildren();
      const [what, id] = params || [];
      view.current = [what, id].filter(Boolean);
      if (what === "new") screen = editorScreen(container, view, null);
      else if (what === "edit" && id) screen = editorScreen(container, view, id);
      else if (what === "job" && id) screen = jobScreen(container, view, id);
      else {
        view.current = [];
        screen = listScreen(container, view);
      }
      if (focus) {
        const title = container.querySelector("h1");
        title?.setAttribute("tabindex", "-1");
        title?.focus();
      }
    };
    show(ctx.params, false);
    const off = ctx.gw.on("status", (s) => {
      if (s.state === "open") screen?.refresh?.();
    });
    return {
      update: (params) => show(params, true),
      canLeave: () => screen?.canLeave?.() ?? true,
      destroy() {
        off();
        screen?.destroy();
      },
    };
  },
};

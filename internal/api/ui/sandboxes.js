// The sandboxes views: every sandbox with what it uses now (filters, sort,
// kill, extend, pause, resume), and one sandbox's page (its state and usage, its exec
// history and egress decisions from the audit log, its files, its
// snapshots with their diffs to now and a restore).
import {
  $, bytes, call, command, confirmButton, duration, el, fillSelect, isZeroTime, ms, query, sandboxLink,
  setText, showError, ttlSelect, visible, when,
} from "./core.js";

// remaining is the time left until t, by the daemon's clock now.
function remaining(t, now) {
  return isZeroTime(t) ? null : new Date(t) - new Date(now);
}

function cpuText(u) {
  if (!u) return "\u2014";
  return u.cpu_used_cores.toFixed(2) + " of " + (u.cpus ? u.cpus : "?") + " cores";
}

function memText(u) {
  if (!u) return "\u2014";
  return bytes(u.memory_bytes) + " of " + bytes(u.memory_limit_bytes);
}

async function kill(id) {
  await call("POST", "/ui/api/sandboxes/" + encodeURIComponent(id) + "/kill");
}

async function extend(id, seconds) {
  await call("POST", "/ui/api/sandboxes/" + encodeURIComponent(id) + "/timeout", { ttl_seconds: Number(seconds) });
}

async function pauseOrResume(id, what) {
  await call("POST", "/ui/api/sandboxes/" + encodeURIComponent(id) + "/" + what);
}

// running says sb's processes run (it may be extended or paused); a
// paused one may be resumed or killed.
function isRunning(sb) {
  return sb.state === "running" || sb.state === "pooled" || sb.state === "creating";
}

// pausedText says how sb is paused and until when, by the daemon's clock now.
function pausedText(p, now) {
  if (!p) return "paused";
  const kept = p.memory_kept_in_host ? "frozen, its memory kept in the host" : bytes(p.stored_bytes) + " stored";
  return kept + "; ends in " + duration(remaining(p.expires_at, now));
}

// ---- the list ----

const rows = new Map(); // sandbox id -> { tr, cells, sb }
let keyNames = {};    // key id -> name
let sortKey = "age";
let sortDesc = false;
let lastNow = "";

const sorters = {
  id: r => r.sb.id, owner: r => r.sb.owner || "", driver: r => r.sb.driver, template: r => r.sb.template, state: r => r.sb.state,
  age: r => -new Date(r.sb.created_at), ttl: r => remaining(r.sb.expires_at, lastNow) ?? Infinity,
  memory: r => r.sb.usage ? r.sb.usage.memory_bytes : -1, cpu: r => r.sb.usage ? r.sb.usage.cpu_used_cores : -1,
  execs: r => r.sb.exec_count,
};

// Numbers sort largest first on the first click; names A to Z.
const numeric = new Set(["memory", "cpu", "execs", "ttl"]);

function makeRow(sb) {
  const id = sb.id;
  const cells = {};
  const td = (name, cls) => (cells[name] = el("td", { class: cls }));
  const tr = el("tr", { class: "sandbox", "data-id": id },
    el("td", { class: "mono" }, sandboxLink(id)), td("owner", "mono"), td("driver"), td("template"), td("state", "state"),
    td("age", "num"), td("ttl", "num"), td("memory", "num memory"), td("cpu", "num cpu"), td("execs", "num execs"), td("actions", "actions"));
  cells.meter = el("meter", { min: 0, max: 1, value: 0 });
  cells.memText = el("span");
  cells.memory.append(cells.memText, el("br"), cells.meter);
  const ext = el("button", { type: "button", class: "extend" }, "Extend");
  ext.addEventListener("click", async () => {
    try {
      await extend(id, $("sb-ttl").value);
      await list.tick();
    } catch (e) { showError(e.message); }
  });
  const k = confirmButton("Kill", "Confirm kill", "kill", async () => { await kill(id); await list.tick(); });
  const act = (label, cls, what) => {
    const b = el("button", { type: "button", class: cls }, label);
    b.addEventListener("click", async () => {
      b.disabled = true;
      try {
        await pauseOrResume(id, what);
        await list.tick();
      } catch (e) { showError(e.message); } finally { b.disabled = false; }
    });
    return b;
  };
  cells.pause = act("Pause", "pause", "pause");
  cells.resume = act("Resume", "resume", "resume");
  cells.actions.append(ext, " ", cells.pause, cells.resume, " ", k);
  return { tr, cells, sb };
}

function fillRow(r, now) {
  const sb = r.sb, c = r.cells;
  const live = isRunning(sb), paused = sb.state === "paused";
  if (c.owner.dataset.key !== (sb.owner || "") || c.owner.dataset.name !== (keyNames[sb.owner] || "")) {
    c.owner.dataset.key = sb.owner || "";
    c.owner.dataset.name = keyNames[sb.owner] || "";
    c.owner.replaceChildren(visible(sb.owner || "(pool)"), keyNames[sb.owner] ? el("span", { class: "keyname" }, keyNames[sb.owner]) : "");
  }
  setText(c.driver, sb.driver);
  setText(c.template, sb.template);
  setText(c.state, sb.state + (sb.end_reason ? " (" + sb.end_reason + ")" : ""));
  c.state.dataset.state = sb.state;
  setText(c.age, duration(new Date(now) - new Date(sb.created_at)));
  setText(c.ttl, live ? duration(remaining(sb.expires_at, now)) : paused ? pausedText(sb.paused, now) : "\u2014");
  setText(c.memText, sb.usage ? memText(sb.usage) : (sb.usage_error ? "unknown" : "\u2014"));
  c.memText.title = visible(sb.usage_error || "");
  c.meter.hidden = !sb.usage;
  if (sb.usage && sb.usage.memory_limit_bytes) c.meter.value = sb.usage.memory_bytes / sb.usage.memory_limit_bytes;
  setText(c.cpu, cpuText(sb.usage));
  setText(c.execs, live ? sb.exec_count : "\u2014");
  for (const b of c.actions.querySelectorAll("button")) b.hidden = !live && !paused;
  c.actions.querySelector("button.extend").hidden = !live;
  c.pause.hidden = sb.state !== "running";
  c.resume.hidden = !paused;
}

function sortRows() {
  const f = sorters[sortKey];
  const all = [...rows.values()];
  all.sort((a, b) => {
    const x = f(a), y = f(b);
    let d = typeof x === "string" ? x.localeCompare(y) : x - y;
    if (d === 0) d = a.sb.id.localeCompare(b.sb.id);
    return sortDesc ? -d : d;
  });
  const tbody = $("sandboxes").querySelector("tbody");
  const order = [...tbody.children];
  if (order.length !== all.length || all.some((r, i) => order[i] !== r.tr)) tbody.append(...all.map(r => r.tr));
  for (const th of $("sandboxes").querySelectorAll("th[data-sort]")) {
    th.setAttribute("aria-sort", th.dataset.sort === sortKey ? (sortDesc ? "descending" : "ascending") : "none");
  }
}

export const list = {
  async open() {
    await this.tick();
  },
  async tick(n) {
    if (n !== undefined && n % 2) return; // every two seconds
    const data = await call("GET", "/ui/api/sandboxes" + query({ key: $("f-key").value, driver: $("f-driver").value, state: $("f-state").value }));
    lastNow = data.now;
    keyNames = Object.fromEntries(data.keys.map(k => [k.id, k.name || ""]));
    fillSelect($("f-key"), data.keys.map(k => [k.id, k.id + (k.name ? " (" + k.name + ")" : "")]), "any");
    fillSelect($("f-driver"), data.drivers, "any");
    const seen = new Set();
    for (const sb of data.sandboxes) {
      seen.add(sb.id);
      let r = rows.get(sb.id);
      if (!r) rows.set(sb.id, (r = makeRow(sb)));
      r.sb = sb;
      fillRow(r, data.now);
    }
    for (const [id, r] of rows) {
      if (!seen.has(id)) { r.tr.remove(); rows.delete(id); }
    }
    sortRows();
    $("sb-none").hidden = rows.size > 0;
  },
};

// ---- one sandbox ----

let cur = "";          // the sandbox shown
let execNext = "";     // cursors of the older pages
let egressNext = "";

function dlRow(dl, term, value) {
  dl.append(el("dt", {}, term), el("dd", {}, value));
}

function renderInfo(d) {
  const sb = d.sandbox, now = d.now;
  const live = isRunning(sb), paused = sb.state === "paused";
  setText($("sd-state"), sb.state);
  $("sd-state").dataset.state = sb.state;
  const dl = el("dl", { id: "sd-info", class: "info" });
  dlRow(dl, "Key", (sb.owner || "(pool)") + (d.key_name ? " (" + d.key_name + ")" : ""));
  dlRow(dl, "Driver", sb.driver + (sb.driver_rule ? " (chosen by " + sb.driver_rule + (sb.driver_reason ? ": " + sb.driver_reason : "") + ")" : ""));
  dlRow(dl, "Template", sb.template);
  dlRow(dl, "Created", when(sb.created_at) + " (" + duration(new Date(now) - new Date(sb.created_at)) + " ago)");
  if (live) {
    dlRow(dl, "TTL left", duration(remaining(sb.expires_at, now)) + " (until " + when(sb.expires_at) + ")");
    dlRow(dl, "Last active", when(sb.last_active_at));
    if (sb.idle_timeout_seconds) dlRow(dl, "Idle timeout", duration(sb.idle_timeout_seconds * 1000));
    dlRow(dl, "Memory now", sb.usage ? memText(sb.usage) : (sb.usage_error || "\u2014"));
    dlRow(dl, "CPU now", sb.usage ? cpuText(sb.usage) + " (over " + ms(sb.usage.cpu_window_ms) + "); " + ms(sb.usage.cpu_ms) + " of CPU time in all" : "\u2014");
    dlRow(dl, "Execs", String(sb.exec_count));
  } else if (paused) {
    if (sb.paused) dlRow(dl, "Paused", when(sb.paused.paused_at) + " (" + pausedText(sb.paused, now) + ")");
    dlRow(dl, "Execs", String(sb.exec_count));
  } else {
    dlRow(dl, "Ended", when(sb.ended_at) + (sb.end_reason ? " (" + sb.end_reason + ")" : ""));
  }
  const l = sb.limits || {};
  dlRow(dl, "Limits", [l.memory_bytes ? bytes(l.memory_bytes) + " memory" : "", l.cpus ? l.cpus + " CPUs" : "", l.pids ? l.pids + " pids" : "",
    l.timeout_ms ? duration(l.timeout_ms) + " per exec" : ""].filter(Boolean).join(", ") || "the template's");
  if (sb.layers && sb.layers.length) dlRow(dl, "Isolation", sb.layers.join(", "));
  $("sd-info").replaceWith(dl);
  const acts = $("sd-actions");
  if (acts.dataset.id !== sb.id || acts.dataset.state !== sb.state) {
    acts.dataset.id = sb.id;
    acts.dataset.state = sb.state;
    acts.replaceChildren();
    const act = (label, id, what) => {
      const b = el("button", { type: "button", class: what, id }, label);
      b.addEventListener("click", async () => {
        b.disabled = true;
        try { await pauseOrResume(sb.id, what); await refreshInfo(); } catch (e) { showError(e.message); } finally { b.disabled = false; }
      });
      return b;
    };
    if (paused) {
      const k = confirmButton("Kill", "Confirm kill", "kill", async () => { await kill(sb.id); await refreshInfo(); });
      k.id = "sd-kill";
      acts.append("Paused: ", act("Resume", "sd-resume", "resume"), " ", k);
    } else if (live) {
      const ext = el("button", { type: "button", class: "extend", id: "sd-extend" }, "Extend");
      ext.addEventListener("click", async () => {
        try { await extend(sb.id, $("sd-ttl").value); await refreshInfo(); } catch (e) { showError(e.message); }
      });
      const k = confirmButton("Kill", "Confirm kill", "kill", async () => { await kill(sb.id); await refreshInfo(); });
      k.id = "sd-kill";
      acts.append("Set the TTL to ", ttlSelect("sd-ttl"), " from now: ", ext, " ", k);
      if (sb.state === "running") acts.append(" ", act("Pause", "sd-pause", "pause"));
    }
  }
  renderEgressSummary(d.egress);
}

function renderEgressSummary(e) {
  const t = $("sd-egress-hosts");
  if (!e) {
    setText($("sd-egress-summary"), "No live egress counters (the sandbox has no network, or has ended).");
    t.hidden = true;
    return;
  }
  setText($("sd-egress-summary"), "Mode " + e.mode + ": " + e.requests + " requests, " + e.allowed + " allowed, " + e.denied + " denied, " +
    e.would_deny + " would be denied; " + bytes(e.bytes_sent) + " sent, " + bytes(e.bytes_received) + " received.");
  t.hidden = e.hosts.length === 0;
  t.querySelector("tbody").replaceChildren(...e.hosts.map(h => el("tr", { class: "egress-host" },
    el("td", { class: "host mono" }, h.host), el("td", { class: "num" }, h.allowed), el("td", { class: "num" }, h.denied),
    el("td", { class: "num" }, h.would_deny), el("td", { class: "num" }, bytes(h.bytes_sent)), el("td", { class: "num" }, bytes(h.bytes_received)))));
}

async function refreshInfo() {
  const d = await call("GET", "/ui/api/sandboxes/" + encodeURIComponent(cur));
  if (d.sandbox.id !== cur) return;
  since = new Date(new Date(d.sandbox.created_at) - 60000).toISOString();
  renderInfo(d);
  let procs = [];
  if (d.sandbox.state === "running") {
    procs = (await call("GET", "/ui/api/sandboxes/" + encodeURIComponent(cur) + "/processes")).processes;
  }
  procs.sort((a, b) => (b.running - a.running) || (new Date(b.started_at) - new Date(a.started_at)));
  $("sd-procs").querySelector("tbody").replaceChildren(...procs.map(p => el("tr", { class: "process", "data-id": p.id, "data-running": String(p.running) },
    el("td", { class: "mono" }, p.id), el("td", {}, (p.background ? "background" : "exec") + (p.pty ? ", terminal" : "")),
    el("td", { class: "what" }, JSON.stringify(p.argv.map(visible))), el("td", { class: "time" }, when(p.started_at)),
    el("td", {}, p.running ? "running" : p.result ? "exit " + p.result.exit_code + " (" + p.result.reason + ")" : "ended"))));
  $("sd-procs-none").hidden = procs.length > 0;
}

function execRow(ev) {
  const u = ev.usage || {};
  return el("tr", { class: "exec", "data-seq": ev.seq },
    el("td", { class: "time" }, when(ev.time)), el("td", { class: "mono" }, ev.key),
    el("td", { class: "what" }, command(ev)),
    el("td", { class: "num" }, ev.exit !== undefined ? ev.exit : ""), el("td", {}, ev.error ? "error: " + ev.error : ev.reason),
    el("td", { class: "num" }, u.wall_ms !== undefined ? ms(u.wall_ms) : ""), el("td", { class: "num" }, u.cpu_ms !== undefined ? ms(u.cpu_ms) : ""),
    el("td", { class: "num" }, u.memory_peak_bytes !== undefined ? bytes(u.memory_peak_bytes) : ""));
}

function egressRow(ev) {
  return el("tr", { class: "egress", "data-decision": ev.decision },
    el("td", { class: "time" }, when(ev.time)), el("td", { class: "host mono" }, ev.host + (ev.port ? ":" + ev.port : "")), el("td", { class: "mono" }, ev.ip),
    el("td", {}, ev.rule), el("td", { class: "decision" }, ev.decision),
    el("td", { class: "num" }, bytes(ev.bytes_sent || 0)), el("td", { class: "num" }, bytes(ev.bytes_received || 0)), el("td", {}, ev.reason));
}

let since = ""; // a minute before the sandbox was made: no event of it is older

// loadEvents fills a table with a page of the sandbox's events of kind.
async function loadEvents(kind, table, none, more, row, before) {
  const p = await call("GET", "/ui/api/audit" + query({ sandbox: cur, kind, n: 50, before, since }));
  const tbody = $(table).querySelector("tbody");
  const trs = p.events.slice().reverse().map(row);
  if (before) tbody.append(...trs); else tbody.replaceChildren(...trs);
  $(none).hidden = tbody.children.length > 0;
  $(more).hidden = !p.next;
  return p.next || "";
}

// diffText renders a diff (GET …/diff) as text: a line per change, then
// the unified diffs. It goes into a <pre> as text, never as markup.
function diffText(d) {
  const lines = ["diff " + d.from + " → " + d.to + ": " + d.added + " added, " + d.deleted + " deleted, " + d.modified + " modified, " + d.other + " other"];
  for (const c of d.changes) lines.push(c.kind.padEnd(9) + c.path + (c.binary ? " (binary)" : ""));
  for (const c of d.changes) if (c.unified) lines.push(c.unified + (c.truncated ? "\\ cut here (too long)" : ""));
  if (d.truncated) lines.push("(some text diffs were cut or left out: too large)");
  return lines.join("\n");
}

async function listSnapshots(running) {
  const id = cur;
  const p = await call("GET", "/ui/api/sandboxes/" + encodeURIComponent(id) + "/snapshots");
  const snaps = p.snapshots.slice().reverse();
  $("sd-snapshots").querySelector("tbody").replaceChildren(...snaps.map(s => {
    const acts = el("td", { class: "actions" });
    if (running) {
      const diff = el("button", { type: "button", class: "diff" }, "Diff to now");
      diff.addEventListener("click", async () => {
        try {
          const d = await call("GET", "/ui/api/sandboxes/" + encodeURIComponent(id) + "/diff" + query({ from: s.id }));
          setText($("sd-diff"), diffText(d));
          $("sd-diff").hidden = false;
        } catch (e) { showError(e.message); }
      });
      const restore = confirmButton("Restore", "Confirm restore", "restore", async () => {
        const r = await call("POST", "/ui/api/sandboxes/" + encodeURIComponent(id) + "/restore", { snapshot: s.id });
        setText($("sd-diff"), "Restored " + r.snapshot.id + ": " + r.added + " files made again, " + r.changed + " changed back, " + r.removed + " removed.");
        $("sd-diff").hidden = false;
        await listFiles($("sd-path").value).catch(() => {});
      });
      acts.append(diff, " ", restore);
    }
    return el("tr", { class: "snapshot", "data-id": s.id },
      el("td", { class: "mono" }, s.id), el("td", { class: "mono" }, s.name || ""), el("td", {}, s.kind + (s.step ? " " + s.step : "")),
      el("td", { class: "num" }, String(s.files)), el("td", { class: "num" }, bytes(s.bytes)), el("td", { class: "time" }, when(s.created)),
      el("td", {}, s.label || ""), acts);
  }));
  $("sd-snapshots-none").hidden = snaps.length > 0;
}

async function listFiles(dir) {
  const p = await call("GET", "/ui/api/sandboxes/" + encodeURIComponent(cur) + "/files/list" + query({ path: dir }));
  const ents = p.entries.slice().sort((a, b) => (a.type === "dir") === (b.type === "dir") ? a.name.localeCompare(b.name) : a.type === "dir" ? -1 : 1);
  const shown = ents.slice(0, 1000);
  $("sd-files").querySelector("tbody").replaceChildren(...shown.map(f => {
    const full = (dir.endsWith("/") ? dir : dir + "/") + f.name;
    let name;
    if (f.type === "dir") {
      name = el("a", { href: "#", class: "dir" }, f.name + "/");
      name.addEventListener("click", ev => { ev.preventDefault(); $("sd-path").value = full; listFiles(full).catch(e => showError(e.message)); });
    } else if (f.type === "file") {
      name = el("a", { href: "/ui/api/sandboxes/" + encodeURIComponent(cur) + "/files" + query({ path: full }), download: "", class: "file" }, f.name);
    } else {
      name = el("span", {}, f.name);
    }
    return el("tr", { class: "file-entry" }, el("td", { class: "name mono" }, name), el("td", {}, f.type), el("td", { class: "num" }, f.type === "file" ? bytes(f.size) : ""),
      el("td", { class: "mono" }, (f.mode & 0o777).toString(8).padStart(3, "0")), el("td", {}, when(f.mod_time)), el("td", { class: "mono" }, f.target || ""));
  }));
  setText($("sd-files-note"), ents.length === 0 ? "The directory is empty." : ents.length > shown.length ? "Showing 1000 of " + ents.length + " entries." : ents.length + (ents.length === 1 ? " entry" : " entries") + ". Files download as they are; nothing here runs or opens them.");
}

// cowSummary says what the sandbox's copy-on-write mounts hold, with a
// link to their review (changes.js).
async function cowSummary(id, running) {
  const p = $("sd-cow");
  if (!running) {
    setText(p, "Only a running sandbox's copy-on-write changes can be reviewed; an ended sandbox's changes that were not applied ended with it.");
    return;
  }
  const c = await call("GET", "/ui/api/sandboxes/" + encodeURIComponent(id) + "/changes");
  const ms = c.mounts || [];
  const n = ms.reduce((s, m) => s + (m.changes || []).length, 0);
  if (ms.length === 0) {
    setText(p, "None: this sandbox writes to no host directory.");
    return;
  }
  p.replaceChildren(visible(ms.map(m => m.target + " (of " + m.source + ")").join(", ") + ": " + n + " pending change" + (n === 1 ? "" : "s") + ". "),
    el("a", { href: "#/change/" + encodeURIComponent(id), id: "sd-cow-review" }, "Review them"));
}

export const detail = {
  async open(id) {
    cur = id;
    since = "";
    setText($("sd-id"), id);
    $("sd-actions").dataset.id = "";
    for (const t of ["sd-execs", "sd-egress", "sd-files", "sd-procs", "sd-snapshots"]) $(t).querySelector("tbody").replaceChildren();
    setText($("sd-files-note"), "");
    setText($("sd-cow"), "");
    setText($("sd-diff"), "");
    $("sd-diff").hidden = true;
    $("sd-path").value = "/workspace";
    await refreshInfo();
    const [a, b] = await Promise.all([
      loadEvents("exec", "sd-execs", "sd-execs-none", "sd-execs-more", execRow),
      loadEvents("egress", "sd-egress", "sd-egress-none", "sd-egress-more", egressRow),
    ]);
    execNext = a;
    egressNext = b;
    const running = $("sd-state").dataset.state === "running";
    await listSnapshots(running).catch(e => { setText($("sd-snapshots-none"), e.message); $("sd-snapshots-none").hidden = false; });
    await cowSummary(id, running).catch(e => setText($("sd-cow"), e.message));
    if (running) {
      await listFiles("/workspace").catch(e => setText($("sd-files-note"), e.message));
    } else {
      setText($("sd-files-note"), $("sd-state").dataset.state === "paused"
        ? "The sandbox is paused: its files are kept with it; resume it to list them."
        : "The sandbox is not running: its files are gone.");
    }
  },
  async tick(n) {
    if (cur && n % 2 === 0) await refreshInfo();
  },
};

export function setup() {
  $("sb-ttl-slot").replaceWith(ttlSelect("sb-ttl"));
  for (const id of ["f-key", "f-driver", "f-state"]) {
    $(id).addEventListener("change", () => list.tick().catch(e => showError(e.message)));
  }
  $("sb-filters").addEventListener("submit", ev => ev.preventDefault());
  for (const th of $("sandboxes").querySelectorAll("th[data-sort]")) {
    th.tabIndex = 0;
    const sortBy = () => {
      const k = th.dataset.sort;
      if (sortKey === k) sortDesc = !sortDesc; else { sortKey = k; sortDesc = numeric.has(k) && k !== "ttl"; }
      sortRows();
    };
    th.addEventListener("click", sortBy);
    th.addEventListener("keydown", ev => { if (ev.key === "Enter") sortBy(); });
  }
  $("sd-execs-more").addEventListener("click", async () => {
    try { execNext = await loadEvents("exec", "sd-execs", "sd-execs-none", "sd-execs-more", execRow, execNext); } catch (e) { showError(e.message); }
  });
  $("sd-egress-more").addEventListener("click", async () => {
    try { egressNext = await loadEvents("egress", "sd-egress", "sd-egress-none", "sd-egress-more", egressRow, egressNext); } catch (e) { showError(e.message); }
  });
  $("sd-files-form").addEventListener("submit", ev => {
    ev.preventDefault();
    listFiles($("sd-path").value).catch(e => showError(e.message));
  });
  $("sd-up").addEventListener("click", () => {
    const p = $("sd-path").value.replace(/\/+$/, "");
    const up = p.slice(0, p.lastIndexOf("/")) || "/";
    $("sd-path").value = up;
    listFiles(up).catch(e => showError(e.message));
  });
}

// The audit log view: the chain's verification status (and the lines
// where it breaks), the events with filters (key, sandbox, kind, time
// range), page by page from the newest.
import { $, bytes, call, command, el, query, sandboxLink, setText, showError, visible, when } from "./core.js";

let cursors = [""]; // cursors[i] reads page i; page 0 is the newest
let page = 0;
let next = "";
let broken = new Set(); // lines verification found wrong

function filters() {
  const t = id => {
    const v = $(id).value;
    return v ? new Date(v).toISOString().replace(/\.\d{3}Z$/, "Z") : "";
  };
  return { key: $("a-key").value.trim(), sandbox: $("a-sandbox").value.trim(), kind: $("a-kind").value, since: t("a-since"), until: t("a-until"), n: $("a-n").value };
}

// what is the event's subject as the operator should read it.
function what(ev) {
  switch (ev.kind) {
    case "exec":
      return command(ev);
    case "egress":
      return (ev.host || "") + (ev.port ? ":" + ev.port : "") + (ev.ip ? " (" + ev.ip + ")" : "");
    case "file_write": case "file_delete":
      return (ev.path || "") + (ev.size ? " (" + bytes(ev.size) + ")" : "");
    case "create": case "destroy":
      return ev.template || "";
    case "checkpoint":
      return "signed checkpoint";
    case "cow_apply": case "cow_discard": case "cow_recover": {
      // A copy-on-write mount's apply or discard: the mount, its host
      // directory, and the first paths decided.
      const fs = ev.files || [];
      return (ev.path || "") + (ev.host ? " of " + ev.host : "") + ": " + fs.length + " path" + (fs.length === 1 ? "" : "s") +
        (fs.length ? " (" + fs.slice(0, 5).map(f => f.path).join(", ") + (fs.length > 5 ? ", \u2026" : "") + ")" : "");
    }
  }
  return command(ev) || ev.path || ev.host || ev.approval || "";
}

function outcome(ev) {
  if (ev.error) return "error";
  if (ev.decision) return ev.decision;
  if (ev.exit !== undefined) return "exit " + ev.exit;
  return "";
}

function row(raw) {
  let ev;
  try { ev = typeof raw === "string" ? JSON.parse(raw) : raw; } catch (e) { ev = {}; }
  const json = el("pre", { class: "json" }, JSON.stringify(ev, null, 1));
  const details = el("details", {}, el("summary", {}, "all fields"), json);
  return el("tr", { class: "event" + (broken.has(ev.seq) ? " broken" : ""), "data-seq": ev.seq, "data-kind": ev.kind },
    el("td", { class: "num" }, ev.seq), el("td", { class: "time" }, when(ev.time)), el("td", { class: "kind" }, ev.kind), el("td", { class: "mono" }, ev.key),
    el("td", { class: "mono" }, sandboxLink(ev.sandbox)), el("td", { class: "what" }, what(ev)), el("td", { class: "outcome" }, outcome(ev)),
    el("td", { class: "reason" }, ev.error || ev.reason || ev.rule || ""), el("td", {}, details));
}

async function load() {
  const f = filters();
  const p = await call("GET", "/ui/api/audit" + query({ ...f, before: cursors[page] }));
  next = p.next || "";
  const evs = p.events.slice().reverse();
  $("audit-log").querySelector("tbody").replaceChildren(...evs.map(row));
  $("a-none").hidden = evs.length > 0;
  $("a-newer").disabled = page === 0;
  $("a-older").disabled = !next;
  setText($("a-page"), "page " + (page + 1) + (evs.length ? ", lines " + evs[evs.length - 1].seq + " to " + evs[0].seq : "") +
    (!evs.length && next ? " (nothing in this stretch of the log; go on with Older)" : ""));
}

async function verify() {
  const v = await call("GET", "/ui/api/audit/verify");
  const box = $("verify");
  box.classList.toggle("ok", v.ok);
  box.classList.toggle("bad", !v.ok);
  let text;
  if (v.ok) {
    text = "Chain verified: " + v.lines + " lines, " + v.checkpoints + " signed checkpoints, sealed through line " + v.last_checkpoint +
      (v.unsealed ? " (" + v.unsealed + " newer line" + (v.unsealed > 1 ? "s" : "") + " not yet covered by a signature)" : "") + ".";
  } else {
    const first = v.problems[0];
    text = "The chain BREAKS at line " + first.line + ": " + first.msg + " (" + v.problem_count + " problem" + (v.problem_count > 1 ? "s" : "") + " in " + v.lines + " lines).";
  }
  setText($("verify-text"), text + " Checked " + when(v.verified_at) + ".");
  $("verify-problems").replaceChildren(...(v.ok ? [] : v.problems.map(p => el("li", { class: "problem", "data-line": p.line }, "line " + p.line + ": " + visible(p.msg)))));
  broken = new Set(v.problems.map(p => p.line));
  for (const tr of $("audit-log").querySelectorAll("tr.event")) tr.classList.toggle("broken", broken.has(Number(tr.dataset.seq)));
}

export async function open(param) {
  if (param) $("a-sandbox").value = param;
  cursors = [""];
  page = 0;
  const keys = await call("GET", "/ui/api/keys");
  $("a-keys").replaceChildren(...keys.keys.map(k => el("option", { value: k.id }, k.name || "")));
  await Promise.all([verify(), load()]);
}

export async function tick(n) {
  if (n % 10 === 0) await verify();
}

export function setup() {
  $("audit-filters").addEventListener("submit", ev => {
    ev.preventDefault();
    cursors = [""];
    page = 0;
    load().catch(e => showError(e.message));
  });
  $("a-clear").addEventListener("click", () => {
    for (const id of ["a-key", "a-sandbox", "a-kind", "a-since", "a-until"]) $(id).value = "";
    cursors = [""];
    page = 0;
    load().catch(e => showError(e.message));
  });
  $("a-older").addEventListener("click", () => {
    if (!next) return;
    cursors[page + 1] = next;
    page++;
    load().catch(e => showError(e.message));
  });
  $("a-newer").addEventListener("click", () => {
    if (page === 0) return;
    page--;
    load().catch(e => showError(e.message));
  });
  $("verify-now").addEventListener("click", () => verify().catch(e => showError(e.message)));
}

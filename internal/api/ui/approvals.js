// The approvals view: pending approvals (with the code, the sandbox and
// the rule that asked) to approve or deny with one click, the recently
// decided ones, and the latest audit events.
import { $, call, el, oddities, showError, visible, sandboxLink } from "./core.js";

// what is the action's payload as the operator should read it: the code,
// or the argv as a JSON list (so that argument boundaries show), or the
// path or host.
function what(req) {
  if (req.code) return req.code;
  if (req.argv && req.argv.length) return JSON.stringify(req.argv.map(visible));
  if (req.host) return req.host + (req.port ? ":" + req.port : "");
  return req.path || "";
}

function raw(req) {
  return req.code || (req.argv || []).join(" ") || req.path || req.host || "";
}

async function decide(id, decision, reasonInput) {
  try {
    await call("POST", "/ui/api/approvals/" + encodeURIComponent(id), { decision, reason: reasonInput.value });
    await refresh();
  } catch (e) {
    showError(e.message);
  }
}

function renderApproval(a) {
  const req = a.request || {};
  const li = el("li", { class: "approval", "data-id": a.id, "data-state": a.state });
  li.append(el("div", { class: "meta" },
    el("span", {}, "sandbox ", el("b", { class: "sandbox" }, a.sandbox)),
    el("span", {}, "rule ", el("b", { class: "rule" }, a.rule)),
    el("span", {}, "asked by ", el("b", {}, a.key)),
    el("span", {}, a.state === "pending" ? "expires " + new Date(a.expires).toLocaleTimeString() : a.state + (a.decided_by ? " by " + a.decided_by : ""))));
  li.append(el("p", { class: "why" }, a.why));
  const payload = raw(req);
  const size = new TextEncoder().encode(payload).length;
  const lines = payload.split("\n").length;
  li.append(el("div", {}, (req.language ? req.language + " code" : req.action) + " (" + size + " bytes, " + lines + " line" + (lines > 1 ? "s" : "") + "):"));
  li.append(el("pre", { class: "code" }, what(req)));
  const notes = oddities(payload);
  if (notes.length) li.append(el("p", { class: "warning" }, "Look closely: this holds " + notes.join(" and ") + "."));
  if (a.state === "pending") {
    const reason = el("input", { class: "reason", type: "text", placeholder: "reason (optional)", "aria-label": "reason" });
    const ok = el("button", { class: "approve", type: "button" }, "Approve");
    const no = el("button", { class: "deny", type: "button" }, "Deny");
    ok.addEventListener("click", () => decide(a.id, "approve", reason));
    no.addEventListener("click", () => decide(a.id, "deny", reason));
    li.append(el("div", {}, reason, " ", ok, " ", no, " ", el("span", { class: "muted" }, size + " bytes, " + lines + " line" + (lines > 1 ? "s" : ""))));
  } else if (a.reason) {
    li.append(el("p", { class: "muted" }, "reason: " + a.reason));
  }
  return li;
}

// The pending list is only redrawn when it changes, so that a reason
// being typed is not lost.
let shown = "";

async function refresh() {
  const [ap, au] = await Promise.all([call("GET", "/ui/api/approvals"), call("GET", "/ui/api/audit?n=50")]);
  const pending = ap.approvals.filter(a => a.state === "pending");
  const decided = ap.approvals.filter(a => a.state !== "pending").slice(0, 20);
  const key = JSON.stringify(pending.map(a => a.id));
  if (key !== shown) {
    $("pending").replaceChildren(...pending.map(renderApproval));
    shown = key;
  }
  $("decided").replaceChildren(...decided.map(renderApproval));
  $("none").hidden = pending.length > 0;
  const rows = au.events.slice().reverse().map(ev => el("tr", { class: "event" },
    el("td", {}, ev.seq), el("td", {}, (ev.time || "").replace("T", " ").slice(0, 19)), el("td", { class: "kind" }, ev.kind),
    el("td", {}, ev.key), el("td", {}, sandboxLink(ev.sandbox)),
    el("td", { class: "what" }, ev.code || (ev.argv ? JSON.stringify(ev.argv.map(visible)) : "") || ev.path || ev.host || ev.reason || ""),
    el("td", {}, ev.decision || (ev.exit !== undefined ? "exit " + ev.exit : "") || ev.rule)));
  $("audit").querySelector("tbody").replaceChildren(...rows);
}

export async function open() {
  shown = "";
  await refresh();
}

export async function tick() {
  await refresh();
}

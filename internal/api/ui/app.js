// airlock approvals page. Everything from the server is put into the page
// with textContent, never as HTML, so code shown here cannot run; and every
// character that would not show as itself (controls, bidi overrides and
// isolates, zero-width and other format characters) is shown as an escape,
// so that what the operator reads is what runs.
"use strict";

let csrf = "";

// hidden matches what is not a letter, mark, number, punctuation, symbol
// or space, newlines and tabs aside: C0 and C1 controls, U+202A-202E and
// U+2066-2069 (bidi), U+200B-200F and U+FEFF (zero width), line and
// paragraph separators, unassigned code points.
const hidden = /[^\p{L}\p{M}\p{N}\p{P}\p{S}\p{Zs}\n\t]/gu;

// visible returns s with each hidden character as ⟨U+XXXX⟩.
function visible(s) {
  return String(s ?? "").replace(hidden, c => "\u27e8U+" + c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0") + "\u27e9");
}

// oddities says what in s the operator should look at twice.
function oddities(s) {
  const notes = [];
  const n = (String(s).match(hidden) || []).length;
  if (n) notes.push(n + " invisible or control character" + (n > 1 ? "s" : "") + " (shown as \u27e8U+\u2026\u27e9)");
  if (/[^\x00-\x7f]/.test(s)) notes.push("non-ASCII characters (look for look-alikes)");
  return notes;
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) {
    e.append(c instanceof Node ? c : document.createTextNode(visible(c)));
  }
  return e;
}

async function call(method, path, body) {
  const opts = { method, headers: {}, credentials: "same-origin" };
  if (method !== "GET") opts.headers["X-CSRF-Token"] = csrf;
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  const data = r.status === 204 ? {} : await r.json();
  if (!r.ok) throw new Error((data.error && data.error.message) || ("HTTP " + r.status));
  return data;
}

function show(loggedIn, who) {
  document.getElementById("login").hidden = loggedIn;
  document.getElementById("app").hidden = !loggedIn;
  document.getElementById("logout").hidden = !loggedIn;
  document.getElementById("who").textContent = loggedIn ? "operator key " + who : "";
}

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
    document.getElementById("app-error").textContent = e.message;
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

async function refresh() {
  const [ap, au] = await Promise.all([call("GET", "/ui/api/approvals"), call("GET", "/ui/api/audit?n=50")]);
  const pending = ap.approvals.filter(a => a.state === "pending");
  const decided = ap.approvals.filter(a => a.state !== "pending").slice(0, 20);
  document.getElementById("pending").replaceChildren(...pending.map(renderApproval));
  document.getElementById("decided").replaceChildren(...decided.map(renderApproval));
  document.getElementById("none").hidden = pending.length > 0;
  const rows = au.events.slice().reverse().map(ev => el("tr", { class: "event" },
    el("td", {}, ev.seq), el("td", {}, (ev.time || "").replace("T", " ").slice(0, 19)), el("td", { class: "kind" }, ev.kind),
    el("td", {}, ev.key), el("td", {}, ev.sandbox),
    el("td", { class: "what" }, ev.code || (ev.argv ? JSON.stringify(ev.argv.map(visible)) : "") || ev.path || ev.host || ev.reason || ""),
    el("td", {}, ev.decision || (ev.exit !== undefined ? "exit " + ev.exit : "") || ev.rule)));
  document.querySelector("#audit tbody").replaceChildren(...rows);
  document.getElementById("app-error").textContent = "";
}

let timer = 0;
async function start() {
  try {
    const s = await call("GET", "/ui/session");
    csrf = s.csrf;
    show(true, s.key);
    await refresh();
    clearInterval(timer);
    timer = setInterval(() => refresh().catch(e => { document.getElementById("app-error").textContent = e.message; }), 1000);
  } catch (e) {
    show(false);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("login-form").addEventListener("submit", async ev => {
    ev.preventDefault();
    const key = document.getElementById("key");
    try {
      await call("POST", "/ui/login", { key: key.value });
      key.value = "";
      document.getElementById("login-error").textContent = "";
      await start();
    } catch (e) {
      document.getElementById("login-error").textContent = e.message;
    }
  });
  document.getElementById("logout").addEventListener("click", async () => {
    try { await call("POST", "/ui/logout"); } catch (e) { /* already gone */ }
    clearInterval(timer);
    csrf = "";
    show(false);
  });
  start();
});

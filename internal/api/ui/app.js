// airlock operator console: login, the views, and which one shows. Each
// view is a module with open(params) (shown), and optionally tick()
// (called every second while it shows) and close().
import { $, call, session, setText, showError } from "./core.js";
import * as sandboxes from "./sandboxes.js";
import * as approvals from "./approvals.js";
import * as auditView from "./audit.js";
import * as keys from "./keys.js";
import * as changes from "./changes.js";

const views = {
  sandboxes: { section: "view-sandboxes", mod: sandboxes.list },
  sandbox: { section: "view-sandbox", mod: sandboxes.detail, nav: "sandboxes" },
  approvals: { section: "view-approvals", mod: approvals },
  changes: { section: "view-changes", mod: changes.list },
  change: { section: "view-change", mod: changes.review, nav: "changes" },
  audit: { section: "view-audit", mod: auditView },
  keys: { section: "view-keys", mod: keys },
};

let current = null;
let timer = 0;
let ticks = 0;

// route reads the view and its parameter from the URL's fragment:
// #/sandboxes, #/sandbox/ID, #/approvals, #/changes, #/change/ID, #/audit,
// #/keys.
function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  const name = views[parts[0]] ? parts[0] : "sandboxes";
  let param = "";
  try { param = decodeURIComponent(parts.slice(1).join("/")); } catch (e) { param = ""; }
  return { name, param };
}

async function open() {
  if (!session.csrf) return;
  const { name, param } = route();
  if (current && current.mod.close) current.mod.close();
  for (const v of Object.values(views)) $(v.section).hidden = true;
  const v = views[name];
  $(v.section).hidden = false;
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("current", a.dataset.view === (v.nav || name));
  }
  current = v;
  showError("");
  try {
    await v.mod.open(param);
  } catch (e) {
    showError(e.message);
  }
}

async function pendingBadge() {
  try {
    const ap = await call("GET", "/ui/api/approvals");
    const n = ap.approvals.filter(a => a.state === "pending").length;
    const b = $("pending-count");
    b.hidden = n === 0;
    setText(b, n);
  } catch (e) { /* the view shows errors */ }
}

// changesBadge counts the pending copy-on-write changes: less often than
// approvals (the daemon walks each sandbox's layer to count them), and
// at once after the page applied or discarded some.
async function changesBadge() {
  try {
    const n = await changes.count();
    const b = $("changes-count");
    b.hidden = n === 0;
    setText(b, n);
  } catch (e) { /* the view shows errors */ }
}

function show(loggedIn) {
  $("login").hidden = loggedIn;
  $("nav").hidden = !loggedIn;
  $("logout").hidden = !loggedIn;
  setText($("who"), loggedIn ? "operator key " + session.key : "");
  if (!loggedIn) {
    for (const v of Object.values(views)) $(v.section).hidden = true;
    clearInterval(timer);
    session.csrf = "";
  }
}

async function start() {
  try {
    const s = await call("GET", "/ui/session");
    session.csrf = s.csrf;
    session.key = s.key;
  } catch (e) {
    show(false);
    return;
  }
  show(true);
  await open();
  pendingBadge();
  changesBadge();
  clearInterval(timer);
  timer = setInterval(async () => {
    ticks++;
    if (ticks % 2 === 0) pendingBadge();
    if (ticks % 10 === 0) changesBadge();
    if (current && current.mod.tick) {
      try { await current.mod.tick(ticks); } catch (e) { showError(e.message); }
    }
  }, 1000);
}

session.onLoggedOut = () => {
  show(false);
  setText($("login-error"), "The session ended; log in again.");
};

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", async ev => {
    ev.preventDefault();
    const key = $("key");
    try {
      await call("POST", "/ui/login", { key: key.value });
      key.value = "";
      setText($("login-error"), "");
      await start();
    } catch (e) {
      setText($("login-error"), e.message);
    }
  });
  $("logout").addEventListener("click", async () => {
    try { await call("POST", "/ui/logout"); } catch (e) { /* already gone */ }
    show(false);
  });
  window.addEventListener("hashchange", open);
  window.addEventListener("airlock:changes", changesBadge);
  sandboxes.setup();
  auditView.setup();
  keys.setup();
  start();
});

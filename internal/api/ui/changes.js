// The changes views: every sandbox's pending changes to host directories
// (copy-on-write mounts), and one sandbox's review: each changed file with
// its diff, checkboxes to choose some, and Apply and Discard. Apply writes
// the chosen changes to the host directory; Discard drops them from the
// sandbox's layer. A change the policy keeps for a person (approval) is
// decided here: the console's caller is always an operator.
//
// File names and diffs are the sandbox's, so hostile: they go into the
// page as text (shown: control, bidi and zero-width characters as marked
// escapes), never as markup.
import { $, bytes, call, confirmButton, el, oddities, sandboxLink, setText, showError, shown, visible } from "./core.js";

function api(id, rest) {
  return "/ui/api/sandboxes/" + encodeURIComponent(id) + "/changes" + (rest || "");
}

// name is a file name as a node: hidden characters (newlines too) marked.
function name(s, cls) {
  return el("span", { class: cls || "path mono" }, ...shown(s, true));
}

// ---- the list ----

let listShown = "";

export const list = {
  async open() {
    listShown = "";
    await this.tick();
  },
  async tick(n) {
    if (n !== undefined && n % 4) return; // every four seconds
    const p = await call("GET", "/ui/api/changes");
    const rows = p.changes || [];
    const key = JSON.stringify(rows);
    if (key === listShown) return;
    listShown = key;
    $("changes").querySelector("tbody").replaceChildren(...rows.map(c => el("tr", { class: "pending-change", "data-sandbox": c.sandbox, "data-target": c.target },
      el("td", { class: "mono" }, sandboxLink(c.sandbox)),
      el("td", { class: "mono key" }, c.key, c.key_name ? el("span", { class: "keyname" }, c.key_name) : ""),
      el("td", { class: "target" }, name(c.target)),
      el("td", { class: "source" }, name(c.source)),
      el("td", { class: "approval" }, c.approval ? el("span", { class: "needs-approval" }, "an operator decides") : "the key's owner or an operator"),
      el("td", { class: "num count" }, String(c.count)),
      el("td", {}, el("a", { href: "#/change/" + encodeURIComponent(c.sandbox), class: "review" }, "Review")))));
    $("changes-none").hidden = rows.length > 0;
  },
};

// ---- one sandbox's review ----

let cur = "";
let reviewShown = ""; // what the review shows, to redraw only on a change
// shownDigest maps each path the review shows to the entry its change
// showed (the change's entry: its type, mode, size, content and symlink
// target; "" for a deletion). An apply sends it as expect: a change the
// sandbox made since the page showed it is then a conflict, and the host
// gets exactly what the operator saw, mode included.
let shownDigest = new Map();

// octal writes a mode as 0644.
function octal(m) {
  return "0" + (m & 0o7777).toString(8).padStart(3, "0");
}

// facts are what one change's line says beside its path.
function facts(c) {
  const b = c.before, a = c.after, out = [];
  const type = e => e.type === "file" ? "file" : e.type === "dir" ? "directory" : e.type;
  if (c.kind === "added" && a) {
    out.push("new " + type(a) + (a.type === "symlink" ? "" : ", mode " + octal(a.mode)) + (a.type === "file" ? ", " + bytes(a.size) : ""));
  } else if (c.kind === "deleted" && b) {
    out.push(type(b) + " removed" + (b.type === "file" ? " (" + bytes(b.size) + ")" : ""));
  } else if (c.kind === "type" && a && b) {
    out.push(type(b) + " \u2192 " + type(a));
  } else if (b && a && a.type === "file" && b.size !== a.size) {
    out.push(bytes(b.size) + " \u2192 " + bytes(a.size));
  }
  if (b && a && b.mode !== a.mode && a.type !== "symlink") out.push("mode " + octal(b.mode) + " \u2192 " + octal(a.mode));
  if (c.binary) out.push("binary: no text diff");
  if (c.truncated) out.push("text diff cut or left out: too large");
  return out.join("; ");
}

// target is a symlink's target change as nodes, or null.
function linkTargets(c) {
  const b = c.before && c.before.type === "symlink" ? c.before.target : null;
  const a = c.after && c.after.type === "symlink" ? c.after.target : null;
  if (b === null && a === null) return null;
  const d = el("div", { class: "link" }, "symlink ");
  if (b !== null) d.append(el("span", { class: "link-before" }, name(b, "mono")));
  if (b !== null && a !== null) d.append(" \u2192 ");
  if (a !== null) d.append(el("span", { class: "link-after" }, name(a, "mono")));
  return d;
}

// unified shows a unified diff line by line: removed, added and hunk lines
// marked, every line's text shown as text.
function unified(text, cut) {
  const pre = el("pre", { class: "diff unified" });
  const lines = text.replace(/\n$/, "").split("\n");
  for (const l of lines) {
    const cls = l.startsWith("+++") || l.startsWith("---") ? "file" : l.startsWith("@@") ? "hunk" : l.startsWith("+") ? "add" : l.startsWith("-") ? "del" : "ctx";
    pre.append(el("span", { class: "line " + cls }, ...shown(l)), "\n");
  }
  if (cut) pre.append(el("span", { class: "line cut" }, "\\ cut here (too long)"), "\n");
  return pre;
}

// renderChange is one change: a checkbox, its kind, its path, what
// changed, why an apply would refuse it, and its diff.
function renderChange(c, sel, many) {
  const box = el("input", { type: "checkbox", class: "pick", "aria-label": "choose " + visible(c.path) });
  box.checked = sel.has(c.path);
  box.dataset.path = c.path;
  const li = el("li", { class: "change", "data-path": c.path, "data-kind": c.kind });
  const head = el("label", { class: "head" }, box, " ", el("span", { class: "kind" }, c.kind), " ", name(c.path));
  li.append(head, el("span", { class: "facts muted" }, facts(c)));
  const link = linkTargets(c);
  if (link) li.append(link);
  if (c.conflict) li.append(el("p", { class: "warning conflict" }, "Conflict (an apply of it fails): " + c.conflict));
  if (c.refused) li.append(el("p", { class: "warning refused" }, "Apply refuses this: " + c.refused));
  if (c.warning) li.append(el("p", { class: "warning mode" }, "Look at its mode: " + c.warning));
  const notes = oddities(c.path + (c.after && c.after.target ? c.after.target : ""));
  if (notes.length) li.append(el("p", { class: "warning" }, "Look closely at the name: it holds " + notes.join(" and ") + "."));
  if (c.unified) {
    const dn = oddities(c.unified).filter(n => !n.startsWith("non-ASCII"));
    if (dn.length) li.append(el("p", { class: "warning" }, "Look closely at the diff: it holds " + dn.join(" and ") + "."));
    const pre = unified(c.unified, c.truncated);
    // Many changes: their diffs open on a click.
    li.append(many ? el("details", {}, el("summary", {}, "text diff"), pre) : pre);
  }
  return li;
}

// below says whether p is d or under it.
function below(p, d) {
  return p === d || p.startsWith(d.endsWith("/") ? d : d + "/");
}

// renderMount is one mount's section; sel is the paths to draw ticked
// (after a redraw); from then on the checkboxes hold what is chosen.
function renderMount(m, sel) {
  const sec = el("section", { class: "cow-mount", "data-target": m.target });
  sec.append(el("h3", {}, "Mount ", name(m.target), " of the host directory ", name(m.source), " ",
    m.approval ? el("span", { class: "needs-approval" }, "an operator decides") : ""));
  if (m.approval) sec.append(el("p", { class: "muted" }, "The policy keeps these changes for a person: the sandbox's own key can list them but not apply or discard them."));
  const changes = m.changes || [];
  if (changes.length === 0) {
    sec.append(el("p", { class: "muted none" }, "No pending change in this mount."));
    return sec;
  }
  const all = el("input", { type: "checkbox", class: "pick-all", "aria-label": "choose every change" });
  const count = el("span", { class: "selected muted" });
  const apply = el("button", { type: "button", class: "apply" }, "Apply chosen");
  const discard = confirmButton("Discard chosen", "Confirm discard", "discard", () => act("discard", m.target, chosen()));
  apply.addEventListener("click", async () => {
    apply.disabled = true;
    try { await act("apply", m.target, chosen()); } catch (e) { showError(e.message); } finally { apply.disabled = false; }
  });
  const ul = el("ul", { class: "changes" }, ...changes.map(c => renderChange(c, sel, changes.length > 100)));
  const boxes = () => [...ul.querySelectorAll("input.pick")];
  // chosen is the paths to send: never empty (empty means every change).
  const chosen = () => {
    const ps = boxes().filter(b => b.checked).map(b => b.dataset.path);
    if (ps.length === 0) throw new Error("choose at least one change first");
    return ps;
  };
  const update = () => {
    const bs = boxes();
    const n = bs.filter(b => b.checked).length;
    all.checked = n === bs.length;
    all.indeterminate = n > 0 && n < bs.length;
    setText(count, n + " of " + bs.length + " chosen");
    apply.disabled = n === 0;
    discard.disabled = n === 0;
  };
  // A directory stands for everything below it: choosing it chooses them,
  // and leaving out one of them leaves out the directories above it.
  ul.addEventListener("change", ev => {
    const b = ev.target;
    if (!b.classList || !b.classList.contains("pick")) return;
    for (const o of boxes()) {
      if (b.checked && below(o.dataset.path, b.dataset.path)) o.checked = true;
      if (!b.checked && o !== b && below(b.dataset.path, o.dataset.path)) o.checked = false;
    }
    update();
  });
  all.addEventListener("change", () => {
    for (const b of boxes()) b.checked = all.checked;
    update();
  });
  sec.append(el("div", { class: "toolbar" }, el("label", {}, all, " all"), " ", count, " ", apply, " ", discard,
    el("span", { class: "muted" }, " Apply writes the chosen changes to the host directory; Discard drops them from the sandbox.")));
  if (m.truncated) sec.append(el("p", { class: "muted" }, "Some text diffs were cut or left out: too large."));
  sec.append(ul);
  update();
  return sec;
}

// report shows what an apply or discard did.
function report(title, cls, groups) {
  const box = $("ch-result");
  box.className = "result " + cls;
  box.replaceChildren(el("p", { class: "title" }, title));
  for (const [label, items] of groups) {
    if (!items || items.length === 0) continue;
    box.append(el("p", {}, label), el("ul", { class: "report" }, ...items.map(i => el("li", {}, ...i))));
  }
  box.hidden = false;
}

async function act(what, target, paths) {
  const id = cur;
  report(what === "apply" ? "Applying\u2026" : "Discarding\u2026", "busy", []);
  try {
    const body = { target, paths };
    if (what === "apply") body.expect = Object.fromEntries(paths.map(p => [p, shownDigest.get(p) ?? ""]));
    const r = await call("POST", api(id, "/" + what), body);
    if (what === "apply") {
      report("Applied " + r.applied.length + " change" + (r.applied.length === 1 ? "" : "s") + " to the host directory" +
        ((r.refused || []).length ? "; " + r.refused.length + " refused" : "") + ".", "applied", [
        ["Written to the host:", r.applied.map(a => [el("span", { class: "kind" }, a.kind), " ", name(a.path), a.note ? " (" + a.note + ")" : ""])],
        ["Refused (left in the sandbox):", (r.refused || []).map(x => [name(x.path), ": " + x.reason])],
      ]);
    } else {
      report("Discarded " + r.discarded.length + " change" + (r.discarded.length === 1 ? "" : "s") + ".", "discarded", [
        ["Dropped from the sandbox:", r.discarded.map(p => [name(p)])],
        ["Left alone:", (r.refused || []).map(x => [name(x.path), ": " + x.reason])],
      ]);
    }
  } catch (e) {
    if (e.status === 409 && e.data && e.data.conflicts) {
      report("Conflict: nothing was applied. Discard these paths, review them again, or apply the others.", "conflict", [
        ["Because of:", e.data.conflicts.map(x => [name(x.path), ": " + x.reason])],
      ]);
    } else {
      report("The " + what + " failed: " + e.message, "failed", []);
    }
  }
  reviewShown = "";
  window.dispatchEvent(new Event("airlock:changes"));
  if (cur === id) await refreshReview([]);
}

async function refreshReview(keep) {
  const id = cur;
  const p = await call("GET", api(id));
  if (id !== cur) return;
  const mounts = p.mounts || [];
  const key = JSON.stringify(mounts);
  if (key === reviewShown) return;
  const redraw = reviewShown !== "";
  reviewShown = key;
  const was = shownDigest;
  shownDigest = new Map(mounts.flatMap(m => (m.changes || []).map(c => [c.path, c.entry || ""])));
  // Keep what was chosen across a redraw, for the paths still there as
  // they were: a change that moved must be chosen again.
  const sel = new Set((keep || [...document.querySelectorAll("#ch-mounts input.pick:checked")].map(b => b.dataset.path))
    .filter(p => was.get(p) === shownDigest.get(p)));
  const note = $("ch-updated");
  note.hidden = !redraw;
  if (redraw) setText(note, "The sandbox changed these since the page first showed them (at " + new Date().toLocaleTimeString() + "): read them again before you decide.");
  $("ch-mounts").replaceChildren(...mounts.map(m => renderMount(m, sel)));
  const n = mounts.reduce((s, m) => s + (m.changes || []).length, 0);
  $("ch-none").hidden = n > 0;
  setText($("ch-none"), mounts.length === 0 ? "This sandbox has no copy-on-write mount." : "This sandbox has no pending change.");
}

export const review = {
  async open(id) {
    cur = id;
    reviewShown = "";
    shownDigest = new Map();
    $("ch-id").replaceChildren(sandboxLink(id));
    $("ch-mounts").replaceChildren();
    $("ch-result").hidden = true;
    $("ch-updated").hidden = true;
    $("ch-none").hidden = true;
    const info = el("dl", { id: "ch-info", class: "info" });
    $("ch-info").replaceWith(info);
    try {
      const d = await call("GET", "/ui/api/sandboxes/" + encodeURIComponent(id));
      info.append(el("dt", {}, "Key"), el("dd", { class: "key" }, (d.sandbox.owner || "(pool)") + (d.key_name ? " (" + d.key_name + ")" : "")),
        el("dt", {}, "State"), el("dd", {}, d.sandbox.state));
    } catch (e) { showError(e.message); }
    await refreshReview([]);
  },
  async tick(n) {
    if (cur && n % 5 === 0) await refreshReview();
  },
};

// count is the number of pending changes for the navigation's badge.
export async function count() {
  const p = await call("GET", "/ui/api/changes");
  return (p.changes || []).reduce((s, c) => s + c.count, 0);
}

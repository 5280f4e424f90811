// What every view of the console shares: how text from the daemon is put
// into the page (always as text, every character that would not show as
// itself made visible), how the daemon is called, and how numbers, sizes
// and times are written.
//
// Everything from the server is put into the page with textContent or
// createTextNode, never as HTML, so code, file names, hosts and audit
// fields shown here cannot run.

// hidden matches what is not a letter, mark, number, punctuation, symbol
// or space, newlines and tabs aside: C0 and C1 controls, U+202A-202E and
// U+2066-2069 (bidi), U+200B-200F and U+FEFF (zero width), line and
// paragraph separators, unassigned code points.
const hidden = /[^\p{L}\p{M}\p{N}\p{P}\p{S}\p{Zs}\n\t]/gu;

// visible returns s with each hidden character as ⟨U+XXXX⟩.
export function visible(s) {
  return String(s ?? "").replace(hidden, c => "\u27e8U+" + c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0") + "\u27e9");
}

// shown returns nodes for s with each hidden character as a marked
// ⟨U+XXXX⟩ (a span of class "ctl", so that it stands out from the text
// around it); with names, newlines and tabs are hidden characters too
// (in a file name they are never what they seem).
export function shown(s, names) {
  const re = names ? /[^\p{L}\p{M}\p{N}\p{P}\p{S}\p{Zs}]/gu : hidden;
  const str = String(s ?? "");
  const out = [];
  let last = 0;
  for (const m of str.matchAll(re)) {
    if (m.index > last) out.push(document.createTextNode(str.slice(last, m.index)));
    const span = document.createElement("span");
    span.className = "ctl";
    span.textContent = "\u27e8U+" + m[0].codePointAt(0).toString(16).toUpperCase().padStart(4, "0") + "\u27e9";
    out.push(span);
    last = m.index + m[0].length;
  }
  if (last < str.length || out.length === 0) out.push(document.createTextNode(str.slice(last)));
  return out;
}

// oddities says what in s the operator should look at twice.
export function oddities(s) {
  const notes = [];
  const n = (String(s).match(hidden) || []).length;
  if (n) notes.push(n + " invisible or control character" + (n > 1 ? "s" : "") + " (shown as \u27e8U+\u2026\u27e9)");
  if (/[^\x00-\x7f]/.test(s)) notes.push("non-ASCII characters (look for look-alikes)");
  return notes;
}

// el makes an element; string children become text, made visible.
export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v; else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(visible(c)));
  }
  return e;
}

// setText replaces e's content with the text s, made visible.
export function setText(e, s) {
  const v = visible(s);
  if (e.textContent !== v) e.textContent = v;
}

export const $ = id => document.getElementById(id);

export const session = { csrf: "", key: "", onLoggedOut: () => {} };

// call sends a request to the daemon and returns its JSON answer. A 401
// means the session is gone: the page shows the login again.
export async function call(method, path, body) {
  const opts = { method, headers: {}, credentials: "same-origin" };
  if (method !== "GET") opts.headers["X-CSRF-Token"] = session.csrf;
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  const data = r.status === 204 ? {} : await r.json().catch(() => ({}));
  if (r.status === 401 && session.csrf) session.onLoggedOut();
  if (!r.ok) {
    const e = new Error((data.error && data.error.message) || ("HTTP " + r.status));
    e.status = r.status;
    e.data = data;
    throw e;
  }
  return data;
}

// query builds "?a=1&b=2" from the set fields of o.
export function query(o) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(o)) if (v !== undefined && v !== null && v !== "") p.set(k, v);
  const s = p.toString();
  return s ? "?" + s : "";
}

export function showError(msg) {
  setText($("app-error"), msg || "");
}

// bytes writes n in binary units.
export function bytes(n) {
  if (n === undefined || n === null) return "\u2014";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(n);
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? String(v) : v.toFixed(v < 10 ? 2 : 1)) + " " + units[i];
}

// duration writes ms as "2d 3h", "4h 05m", "3m 07s" or "12s".
export function duration(ms) {
  if (ms === undefined || ms === null || isNaN(ms)) return "\u2014";
  const neg = ms < 0;
  let s = Math.floor(Math.abs(ms) / 1000);
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  const p2 = n => String(n).padStart(2, "0");
  const t = d ? d + "d " + h + "h" : h ? h + "h " + p2(m) + "m" : m ? m + "m " + p2(s) + "s" : s + "s";
  return neg ? "-" + t : t;
}

// ms writes a short duration: "13 ms", "1.25 s", else as duration.
export function ms(n) {
  if (n === undefined || n === null || isNaN(n)) return "\u2014";
  if (n < 1000) return n + " ms";
  if (n < 60000) return (n / 1000).toFixed(2) + " s";
  return duration(n);
}

// when writes a time as local "YYYY-MM-DD HH:MM:SS".
export function when(t) {
  if (!t || t.startsWith("0001-")) return "\u2014";
  const d = new Date(t);
  if (isNaN(d)) return String(t);
  const p2 = n => String(n).padStart(2, "0");
  return d.getFullYear() + "-" + p2(d.getMonth() + 1) + "-" + p2(d.getDate()) + " " + p2(d.getHours()) + ":" + p2(d.getMinutes()) + ":" + p2(d.getSeconds());
}

export function isZeroTime(t) { return !t || t.startsWith("0001-"); }

// command is an exec's command as the operator should read it: the code
// (with its language), or the argv as a JSON list, so that argument
// boundaries show.
export function command(ev) {
  if (ev.code) return (ev.language ? ev.language + ": " : "") + ev.code;
  if (ev.argv && ev.argv.length) return JSON.stringify(ev.argv.map(visible));
  return "";
}

// confirmButton is a button that acts on its second click within 4 s,
// saying so after the first.
export function confirmButton(label, armedLabel, cls, act) {
  const b = el("button", { type: "button", class: cls }, label);
  let timer = 0;
  b.addEventListener("click", async () => {
    if (!b.classList.contains("armed")) {
      b.classList.add("armed");
      b.textContent = armedLabel;
      timer = setTimeout(() => { b.classList.remove("armed"); b.textContent = label; }, 4000);
      return;
    }
    clearTimeout(timer);
    b.classList.remove("armed");
    b.textContent = label;
    b.disabled = true;
    try { await act(); } catch (e) { showError(e.message); } finally { b.disabled = false; }
  });
  return b;
}

// ttlChoices are what Extend offers: the new TTL, from now.
export const ttlChoices = [["5 min", 300], ["15 min", 900], ["1 h", 3600], ["4 h", 14400], ["24 h", 86400]];

export function ttlSelect(id) {
  return el("select", { id, class: "ttl", "aria-label": "new TTL from now" }, ...ttlChoices.map(([l, s], i) => el("option", { value: s, selected: i === 1 }, l)));
}

// sandboxLink links to the console's page of a sandbox.
export function sandboxLink(id) {
  if (!id) return "";
  return el("a", { href: "#/sandbox/" + encodeURIComponent(id), class: "sandbox-link" }, id);
}

// fillSelect puts options into a select, keeping what is selected;
// values are strings or [value, label] pairs.
export function fillSelect(sel, values, anyLabel) {
  const pairs = values.map(v => Array.isArray(v) ? v : [v, v]);
  const cur = sel.value;
  const want = ["", ...pairs.map(p => p[0])];
  const have = [...sel.options].map(o => o.value);
  if (have.length === want.length && have.every((v, i) => v === want[i])) return;
  sel.replaceChildren(el("option", { value: "" }, anyLabel), ...pairs.map(([v, l]) => el("option", { value: v }, l)));
  sel.value = want.includes(cur) ? cur : "";
}

// The keys view: every API key with its quotas and what it holds now;
// make a key (its secret shown once) and revoke one.
import { $, bytes, call, confirmButton, el, session, setText, showError, when } from "./core.js";

function rate(r) {
  return r.creates_per_second + " creates/s, " + r.execs_per_second + " execs/s, " + r.max_in_flight + " in flight";
}

async function refresh() {
  const d = await call("GET", "/ui/api/keys");
  $("keys").querySelector("tbody").replaceChildren(...d.keys.map(k => {
    const revoke = confirmButton("Revoke", k.id === session.key ? "Revoke your own key?" : "Confirm revoke", "revoke", async () => {
      await call("POST", "/ui/api/keys/" + encodeURIComponent(k.id) + "/revoke");
      await refresh();
    });
    return el("tr", { class: "key", "data-id": k.id },
      el("td", { class: "mono" }, k.id), el("td", { class: "name" }, k.name, k.labels ? el("span", { class: "keyname" }, Object.entries(k.labels).map(([n, v]) => n + "=" + v).join(", ")) : ""), el("td", {}, k.role), el("td", {}, when(k.created_at)),
      el("td", { class: "mono" }, k.created_by || "(CLI)"),
      el("td", { class: "num" }, k.live_sandboxes + " of " + k.quota.max_sandboxes),
      el("td", { class: "num" }, bytes(k.memory_bytes) + " of " + bytes(k.quota.max_memory_bytes)),
      el("td", {}, rate(k.rate)), el("td", { class: "actions" }, revoke));
  }));
}

export async function open() {
  $("new-secret").hidden = true;
  setText($("new-secret-text"), "");
  await refresh();
}

export function setup() {
  $("key-form").addEventListener("submit", async ev => {
    ev.preventDefault();
    const num = id => {
      const v = $(id).value;
      return v === "" ? 0 : Number(v);
    };
    const body = { name: $("k-name").value, role: $("k-role").value, quota: { max_sandboxes: num("k-max"), max_memory_bytes: num("k-mem") * 1024 * 1024 } };
    try {
      const k = await call("POST", "/ui/api/keys", body);
      setText($("new-secret-text"), k.secret);
      $("new-secret").hidden = false;
      $("key-form").reset();
      await refresh();
    } catch (e) {
      showError(e.message);
    }
  });
}

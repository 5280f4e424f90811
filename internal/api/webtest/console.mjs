// console.mjs URL OPERATOR_KEY AGENT_KEY OUT_DIR PLAN_JSON: drives the
// airlock operator console in headless Chromium against a running daemon
// that cmd/airlock's TestConsoleInChromium set up as PLAN_JSON says, checks
// what each view shows, and acts from the page: an agent key is refused;
// the sandboxes list filters and sorts, its heaviest sandbox is found,
// read (exec history, egress decisions) and killed; another is extended;
// files are listed and downloaded; the audit log filters and pages; a key
// is made and revoked. Every payload from a sandbox or an agent must show
// as text. Screenshots of each view go to OUT_DIR. Prints one JSON line
// "RESULT {...}" and exits 0, or prints why and exits 1.
//
// With PLAN_JSON {"mode":"broken","line":N} it only checks that the audit
// view reports the chain broken at line N.
import { chromium } from "playwright-core";
import { readFile } from "node:fs/promises";

const [url, opKey, agentKey, outDir, planText] = process.argv.slice(2);
const plan = JSON.parse(planText);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
const problems = [];
const result = {};
let failed = false;

function check(ok, msg) {
  if (!ok) throw new Error(msg);
}

// waitFor polls fn until it returns a truthy value.
async function waitFor(what, fn, ms = 15000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) { last = e.message; }
    await new Promise(r => setTimeout(r, 100));
  }
  throw new Error("timed out waiting for " + what + " (last: " + JSON.stringify(last) + ")");
}

async function shot(page, name) {
  await page.screenshot({ path: outDir + "/" + name + ".png", fullPage: true });
}

// noInjection checks that no payload became markup, and that the page
// shows no raw control or bidi character.
async function noInjection(page, where) {
  const n = await page.evaluate(() => document.querySelectorAll("img, iframe, object, embed, script:not([src='/ui/app.js'])").length);
  check(n === 0, where + ": " + n + " elements were injected from a payload");
  const all = await page.locator("body").textContent();
  const raw = [...all].filter(c => /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/.test(c));
  check(raw.length === 0, where + ": the page shows raw control or bidi characters: " + raw.map(c => "U+" + c.codePointAt(0).toString(16)).join(" "));
}

async function rowIDs(page) {
  return page.locator("#sandboxes tbody tr.sandbox").evaluateAll(trs => trs.map(tr => tr.dataset.id));
}

async function login(page, key) {
  await page.fill("#key", key);
  await page.click("#login-button");
}

try {
  const context = await browser.newContext({ acceptDownloads: true, viewport: { width: 1500, height: 900 } });
  const page = await context.newPage();
  page.on("pageerror", e => problems.push("page error: " + e.message));
  page.on("console", m => { if (m.type() === "error" && m.text().includes("Content Security Policy")) problems.push("console: " + m.text()); });
  page.on("dialog", d => { problems.push("a dialog opened: script from a payload ran: " + d.message()); d.dismiss(); });

  if (plan.mode === "broken") {
    await page.goto(url + "/ui/#/audit");
    await login(page, opKey);
    const text = await waitFor("the verification status", async () => {
      const t = await page.locator("#verify-text").textContent();
      return t.includes("BREAKS") ? t : null;
    });
    check(await page.locator("#verify.bad").count() === 1, "the status is not marked bad");
    check(text.includes("line " + plan.line + ":"), "the status does not name line " + plan.line + ": " + text);
    const first = await page.locator("#verify-problems li.problem").first().getAttribute("data-line");
    check(first === String(plan.line), "the first problem is at line " + first);
    await page.locator("#audit-log tr.event.broken").first().waitFor({ timeout: 10000 }).catch(() => {});
    await shot(page, "audit-broken");
    result.broken = text;
  } else {
    // 1. An agent key cannot open the console.
    await page.goto(url + "/ui/");
    await login(page, agentKey);
    await waitFor("the agent key's refusal", async () => (await page.locator("#login-error").textContent()).includes("operator key"));
    check(await page.locator("#nav").isHidden(), "the console opened for an agent key");
    const direct = await page.evaluate(async () => (await fetch("/ui/api/sandboxes")).status);
    check(direct === 401, "GET /ui/api/sandboxes without a session: " + direct);
    await shot(page, "login-refused");

    // 2. The operator logs in and sees every sandbox, with usage.
    await login(page, opKey);
    await page.locator("#view-sandboxes").waitFor();
    await waitFor("every sandbox of the plan", async () => (await rowIDs(page)).length >= plan.live.length);
    const ids = await rowIDs(page);
    for (const id of plan.live) check(ids.includes(id), "sandbox " + id + " is not listed: " + ids);
    check(!ids.includes(plan.destroyed), "a destroyed sandbox is listed as live");
    // Usage shows for every running sandbox.
    await waitFor("memory figures", async () => {
      const t = await page.locator("#sandboxes tbody td.memory").allTextContents();
      return t.length && t.every(x => x.includes("MiB") || x.includes("KiB"));
    });

    // 3. Filters: by key, by driver, by state.
    await page.selectOption("#f-key", plan.otherKey);
    await waitFor("the key filter", async () => JSON.stringify(await rowIDs(page)) === JSON.stringify([plan.otherSandbox]));
    await page.selectOption("#f-key", "");
    const drivers = await page.locator("#f-driver option").evaluateAll(os => os.map(o => o.value).filter(Boolean));
    check(drivers.includes("native"), "the driver filter does not offer native: " + drivers);
    for (const d of drivers) {
      await page.selectOption("#f-driver", d);
      await waitFor("the driver filter " + d, async () => {
        const cells = await page.locator("#sandboxes tbody tr.sandbox td:nth-child(3)").allTextContents();
        const want = d === "native" ? plan.live.length : 0;
        return cells.length === want && cells.every(c => c === d);
      });
    }
    await page.selectOption("#f-driver", "");
    await page.selectOption("#f-state", "destroyed");
    await waitFor("the state filter", async () => {
      const got = await rowIDs(page);
      return got.includes(plan.destroyed) && !got.some(id => plan.live.includes(id));
    });
    await shot(page, "sandboxes-destroyed");
    await page.selectOption("#f-state", "live");
    await waitFor("the live sandboxes again", async () => (await rowIDs(page)).length === plan.live.length);

    // 4. Extend one sandbox to an hour from now.
    await page.selectOption("#sb-ttl", "3600");
    await page.locator(`#sandboxes tr.sandbox[data-id="${plan.extend}"] button.extend`).click();
    await waitFor("the longer TTL", async () => {
      const t = await page.locator(`#sandboxes tr.sandbox[data-id="${plan.extend}"] td:nth-child(7)`).textContent();
      return /^(59m|1h)/.test(t) ? t : null;
    });
    result.extended = plan.extend;

    // 5. The sandbox that uses the most memory: sort by memory.
    await page.click('#sandboxes th[data-sort="memory"]');
    check(await page.getAttribute('#sandboxes th[data-sort="memory"]', "aria-sort") === "descending", "memory does not sort largest first");
    const top = (await rowIDs(page))[0];
    check(top === plan.heavy, "the top of the memory sort is " + top + ", not " + plan.heavy);
    await noInjection(page, "sandboxes");
    await shot(page, "sandboxes");

    // 6. What it ran and where it connected.
    await page.locator(`#sandboxes tr.sandbox[data-id="${top}"] a.sandbox-link`).click();
    await page.locator("#view-sandbox").waitFor();
    await waitFor("the exec history", async () => (await page.locator("#sd-execs tbody tr.exec").count()) >= plan.heavyExecs);
    const execs = await page.locator("#sd-execs tbody td.what").allTextContents();
    check(execs.some(t => t.includes("<img src=x onerror=alert(1)>") && t.includes("\u27e8U+202E\u27e9")), "the argv payload is not shown as text: " + JSON.stringify(execs));
    const hosts = await page.locator("#sd-egress tbody td.host").allTextContents();
    check(hosts.some(h => h === plan.allowedHost), "the allowed egress host " + plan.allowedHost + " is not shown: " + hosts);
    check(hosts.some(h => h.includes("<img src=x onerror=alert('host')>")), "the egress host payload is not shown as text: " + hosts);
    const decisions = await page.locator("#sd-egress tbody tr.egress").evaluateAll(trs => trs.map(tr => tr.dataset.decision));
    check(decisions.includes("allow") && decisions.includes("deny"), "egress decisions: " + decisions);
    const received = await page.locator("#sd-egress tbody tr.egress[data-decision=allow] td:nth-child(7)").first().textContent();
    check(received !== "0 B", "the allowed request's bytes are not shown: " + received);
    await page.locator("#sd-procs tbody tr.process").first().waitFor();
    const proc = await page.locator("#sd-procs tbody tr.process").first().textContent();
    check(proc.includes("bytearray(96 << 20)") && proc.includes("background") && proc.endsWith("running"), "the background process is not listed first, as running: " + proc);
    const mem = await page.locator("#sd-info").textContent();
    check(mem.includes("MiB of"), "the sandbox's memory is not shown: " + mem);
    check(await page.locator("#sd-snapshots.pending-feature").count() === 0 && await page.locator("#sd-snapshots thead").count() === 1, "the snapshots section is not built");
    await noInjection(page, "sandbox");
    await shot(page, "sandbox");

    // 7. Kill it from its page.
    await page.click("#sd-kill");
    check((await page.locator("#sd-kill").textContent()) === "Confirm kill", "the kill button does not ask to confirm");
    await page.click("#sd-kill");
    await waitFor("the sandbox's end", async () => (await page.locator("#sd-state").textContent()) === "destroyed");
    result.killed = top;
    await shot(page, "sandbox-killed");

    // 8. Files of another sandbox: a name carrying a payload, a download.
    await page.goto(url + "/ui/#/sandbox/" + plan.files);
    await page.locator("#sd-files tbody tr.file-entry").first().waitFor();
    const names = await page.locator("#sd-files tbody td.name").allTextContents();
    check(names.includes("<img src=x onerror=alert('file')>"), "the file name payload is not shown as text: " + names);
    await page.locator("#sd-files a.dir", { hasText: "dir/" }).click();
    await page.locator("#sd-files a.file", { hasText: "a.txt" }).waitFor();
    const [dl] = await Promise.all([page.waitForEvent("download"), page.locator("#sd-files a.file", { hasText: "a.txt" }).click()]);
    const body = await readFile(await dl.path(), "utf8");
    check(dl.suggestedFilename() === "a.txt" && body === plan.fileContent, "download: " + dl.suggestedFilename() + " " + JSON.stringify(body));
    await noInjection(page, "files");
    await shot(page, "sandbox-files");

    // 9. Approvals, as before.
    await page.click('#nav a[data-view="approvals"]');
    await page.locator("#audit tr.event").first().waitFor();
    await shot(page, "approvals");

    // 10. The audit log: verified, filtered, paged; payloads as text.
    await page.click('#nav a[data-view="audit"]');
    await waitFor("the verification status", async () => (await page.locator("#verify-text").textContent()).startsWith("Chain verified"));
    check(await page.locator("#verify.ok").count() === 1, "the verified status is not marked ok");
    await page.locator("#audit-log tr.event").first().waitFor();
    await page.fill("#a-sandbox", plan.files);
    await page.selectOption("#a-kind", "exec");
    await page.click("#a-apply");
    await waitFor("the filtered audit log", async () => {
      const kinds = await page.locator("#audit-log tbody td.kind").allTextContents();
      return kinds.length > 0 && kinds.every(k => k === "exec");
    });
    const whats = await page.locator("#audit-log tbody td.what").allTextContents();
    check(whats.some(t => t.includes("<script>alert('audit')</script>")), "the audit field payload is not shown as text: " + whats);
    const sbs = await page.locator("#audit-log tbody td:nth-child(5)").allTextContents();
    check(sbs.every(s => s === plan.files), "the sandbox filter let others through: " + sbs);
    await noInjection(page, "audit");
    await shot(page, "audit-filtered");
    // Filter by key, then by a time range that holds nothing.
    await page.click("#a-clear");
    await page.fill("#a-key", plan.otherKey);
    await page.click("#a-apply");
    await waitFor("the key filter", async () => {
      const keys = await page.locator("#audit-log tbody td:nth-child(4)").allTextContents();
      return keys.length > 0 && keys.every(k => k === plan.otherKey);
    });
    await page.fill("#a-key", "");
    await page.fill("#a-until", "2001-01-01T00:00");
    await page.click("#a-apply");
    await page.locator("#a-none").waitFor({ state: "visible" });
    // Paging: 25 a page, older, newer.
    await page.click("#a-clear");
    await page.selectOption("#a-n", "25");
    await page.click("#a-apply");
    await waitFor("a full first page", async () => (await page.locator("#audit-log tbody tr.event").count()) === 25);
    const firstTop = await page.locator("#audit-log tbody tr.event").first().getAttribute("data-seq");
    await page.click("#a-older");
    await waitFor("the second page", async () => {
      const s = await page.locator("#audit-log tbody tr.event").first().getAttribute("data-seq");
      return s && Number(s) === Number(firstTop) - 25;
    });
    await page.click("#a-newer");
    await waitFor("the first page again", async () => Number(await page.locator("#audit-log tbody tr.event").first().getAttribute("data-seq")) >= Number(firstTop));
    await shot(page, "audit");

    // 11. Keys: list with usage, make one (its name a payload), revoke it.
    await page.click('#nav a[data-view="keys"]');
    await page.locator(`#keys tr.key[data-id="${plan.otherKey}"]`).waitFor();
    const use = await page.locator(`#keys tr.key[data-id="${plan.otherKey}"] td:nth-child(6)`).textContent();
    check(use.startsWith("1 of "), "the other key's live sandboxes: " + use);
    await page.fill("#k-name", "<img src=x onerror=alert('key')>");
    await page.fill("#k-max", "3");
    await page.click("#k-create");
    await page.locator("#new-secret").waitFor({ state: "visible" });
    const secret = await page.locator("#new-secret-text").textContent();
    check(secret.startsWith("airlock_"), "no secret shown: " + secret);
    const row = page.locator("#keys tr.key", { hasText: "<img src=x onerror=alert('key')>" });
    await row.waitFor();
    const newID = await row.getAttribute("data-id");
    check((await row.locator("td:nth-child(6)").textContent()) === "0 of 3", "the new key's quota is not shown");
    await noInjection(page, "keys");
    await shot(page, "keys");
    result.createdKey = newID;
    result.createdSecret = secret;
    await row.locator("button.revoke").click();
    await row.locator("button.revoke").click();
    await page.locator(`#keys tr.key[data-id="${newID}"]`).waitFor({ state: "detached" });
    result.revokedKey = newID;
  }
  if (problems.length) throw new Error(problems.join("; "));
  console.log("RESULT " + JSON.stringify(result));
} catch (e) {
  console.log("FAIL: " + e.message + (problems.length ? " (also: " + problems.join("; ") + ")" : ""));
  failed = true;
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);

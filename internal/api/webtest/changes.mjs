// changes.mjs URL KEY AGENTKEY OUTDIR PLAN: logs in to the console in headless
// Chromium with an operator key and reviews a sandbox's pending changes to
// host directories (two copy-on-write mounts): the list names the
// sandbox, its key, each mount and who decides; the sandbox's page links
// to the review; the second mount's one change is applied from its own
// section; the review shows each changed file of the first as text (a
// name that is markup, a diff with a script and a bidi override, a name
// with one: escaped, each override a marked escape, nothing run); an apply
// of a path the host changed is reported as a conflict, and so is an
// apply of a file the sandbox rewrote (through the API with AGENTKEY)
// after the page showed it; the two chosen files are applied as shown
// again, a change made while the review shows is announced, the rest is
// discarded, the list ends empty, and the audit log names the apply. The
// page's timers are the test's (page.clock): it refreshes only when told.
// PLAN is JSON: sandbox, target, source, key, keyName, paths (every
// pending path of target), img, edit, conflict, link, inner, fifo,
// bidiName, apply (the paths to apply), late (what the sandbox writes to
// img after the review), target2, source2, added2 (the second mount and
// its one change).
// Screenshots go to OUTDIR. Prints "RESULT {applied, discarded}" and exits
// 0, or prints why and exits 1. Run by cmd/airlock's
// TestChangesPageInChromium.
import { chromium } from "playwright-core";

const [url, key, agentKey, outDir, planJSON] = process.argv.slice(2);
const plan = JSON.parse(planJSON);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});

function check(ok, what) {
  if (!ok) throw new Error(what);
}

// until polls fn(arg) in the page until it is true, for at most 10 s.
// (page.waitForFunction compiles its predicate in the page when it polls,
// which the console's CSP forbids.)
async function until(page, fn, arg, what) {
  for (const end = Date.now() + 10000; ; await new Promise(r => setTimeout(r, 100))) {
    if (await page.evaluate(fn, arg)) return;
    if (Date.now() > end) throw new Error("waited 10 s for " + what);
  }
}

// Raw control, bidi and zero-width characters: never in the page's text.
const rawHidden = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/;

// asShown is a path as the page writes it: each such character escaped.
const asShown = p => p.replace(new RegExp(rawHidden.source, "g"), c => "\u27e8U+" + c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0") + "\u27e9");

let failed = false;
let page;
try {
  page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const problems = [];
  page.on("pageerror", e => problems.push("page error: " + e.message));
  page.on("console", m => { if (m.type() === "error" && m.text().includes("Content Security Policy")) problems.push("console: " + m.text()); });
  page.on("dialog", d => { problems.push("a dialog opened (script from the sandbox ran): " + d.message()); d.dismiss(); });
  // The page's timers run only when the test moves the clock.
  await page.clock.install();
  await page.clock.pauseAt(new Date(Date.now() + 1000));
  // write puts content at path in the sandbox, as its own key would.
  const write = async (path, content) => {
    const r = await fetch(url + "/v1/sandboxes/" + plan.sandbox + "/files?mode=644&path=" + encodeURIComponent(path),
      { method: "PUT", headers: { Authorization: "Bearer " + agentKey, "Content-Type": "application/octet-stream" }, body: content });
    check(r.ok, "write " + path + ": " + r.status + " " + await r.text());
  };
  const shot = name => page.screenshot({ path: outDir + "/" + name + ".png", fullPage: true });

  await page.goto(url + "/ui/#/changes");
  await page.fill("#key", key);
  await page.click("#login-button");

  // The list.
  const row = page.locator(`tr.pending-change[data-sandbox="${plan.sandbox}"][data-target="${plan.target}"]`);
  await row.waitFor({ timeout: 15000 });
  const cells = await row.evaluate(tr => ({
    key: tr.querySelector(".key").textContent, target: tr.querySelector(".target").textContent,
    source: tr.querySelector(".source").textContent, approval: tr.querySelector(".approval").textContent,
    count: tr.querySelector(".count").textContent,
  }));
  console.log("list: " + JSON.stringify(cells));
  check(cells.key.includes(plan.key) && cells.key.includes(plan.keyName), "the list does not name the key: " + cells.key);
  check(cells.target === plan.target && cells.source === plan.source, "the list's mount: " + cells.target + " " + cells.source);
  check(cells.approval.includes("an operator decides"), "the list does not say an operator decides: " + cells.approval);
  check(cells.count === String(plan.paths.length), "the list counts " + cells.count + " changes, want " + plan.paths.length);
  // The second mount: its key's owner may decide too.
  const row2 = page.locator(`tr.pending-change[data-sandbox="${plan.sandbox}"][data-target="${plan.target2}"]`);
  const cells2 = await row2.evaluate(tr => ({ source: tr.querySelector(".source").textContent, approval: tr.querySelector(".approval").textContent, count: tr.querySelector(".count").textContent }));
  check(cells2.source === plan.source2 && cells2.approval === "the key's owner or an operator" && cells2.count === "1", "the second mount's row: " + JSON.stringify(cells2));
  const total = plan.paths.length + 1;
  await page.locator("#changes-count:not([hidden])").waitFor({ timeout: 5000 });
  check(await page.locator("#changes-count").textContent() === String(total), "the navigation's badge");
  await shot("changes");

  // The sandbox's page says what its mounts hold and links to the review.
  await row.locator("a.sandbox-link").click();
  await page.locator("#sd-cow-review").waitFor({ timeout: 10000 });
  const sdCow = await page.locator("#sd-cow").textContent();
  check(sdCow === `${plan.target} (of ${plan.source}), ${plan.target2} (of ${plan.source2}): ${total} pending changes. Review them`, "the sandbox page's cow mounts: " + sdCow);
  await page.goBack();

  // The review.
  await row.locator("a.review").click();
  const mount = page.locator(`section.cow-mount[data-target="${plan.target}"]`);
  await mount.waitFor({ timeout: 10000 });
  await until(page, n => document.querySelectorAll("li.change").length === n, total, "every change in the review");

  // Apply the second mount's one change: its own toolbar sends its target.
  const mount2 = page.locator(`section.cow-mount[data-target="${plan.target2}"]`);
  check(await mount2.locator(".needs-approval").count() === 0, "the second mount is marked as needing an operator");
  await mount2.locator("input.pick-all").check();
  await mount2.locator("button.apply").click();
  await page.locator("#ch-result.applied").waitFor({ timeout: 10000 });
  const applied2 = await page.locator("#ch-result ul.report li .path").allTextContents();
  check(JSON.stringify(applied2) === JSON.stringify([plan.added2]), "applied in the second mount: " + applied2);
  await until(page, n => document.querySelectorAll("li.change").length === n, plan.paths.length, "the second mount's change gone from the review");
  await mount2.locator("p.none").waitFor({ timeout: 10000 });

  const review = async () => page.evaluate(t => [...document.querySelectorAll(`section.cow-mount[data-target="${t}"] li.change`)].map(li => ({
    path: li.dataset.path, kind: li.dataset.kind,
    shown: li.querySelector(".head .path").textContent,
    facts: li.querySelector(".facts").textContent,
    link: li.querySelector(".link") ? li.querySelector(".link").textContent : null,
    diff: li.querySelector("pre.unified") ? li.querySelector("pre.unified").textContent : null,
    marked: [...li.querySelectorAll("pre.unified span.ctl")].map(s => s.textContent),
    nameMarked: [...li.querySelectorAll(".head .path span.ctl")].map(s => s.textContent),
    warnings: [...li.querySelectorAll(".warning")].map(w => w.textContent),
  })), plan.target);
  const changes = await review();
  console.log("review: " + JSON.stringify(changes));
  const byPath = Object.fromEntries(changes.map(c => [c.path, c]));
  check(JSON.stringify(changes.map(c => c.path).sort()) === JSON.stringify([...plan.paths].sort()), "the review lists " + changes.map(c => c.path));
  const img = byPath[plan.img];
  check(img && img.kind === "added" && img.shown === plan.img, "the file named with markup is not shown as its name: " + JSON.stringify(img));
  check(img.diff && img.diff.includes("+hello <b>there</b>"), "the new file's content is not shown as text: " + img.diff);
  const edit = byPath[plan.edit];
  check(edit && edit.kind === "modified", "edit: " + JSON.stringify(edit));
  check(edit.diff.includes("+<script>alert(\"diff\")</script> \u27e8U+202E\u27e9txt.exe"),
    "the diff does not show the script as text and the override as an escape: " + edit.diff);
  check(edit.marked.includes("\u27e8U+202E\u27e9"), "the bidi override is not marked out: " + JSON.stringify(edit.marked));
  check(edit.warnings.some(w => w.includes("invisible or control character")), "no warning about the override: " + edit.warnings);
  check(byPath[plan.link].link === "symlink edit.txt", "the symlink's target: " + byPath[plan.link].link);
  check(byPath[plan.conflict].facts.includes("mode 0644 \u2192 0755"), "the mode change: " + byPath[plan.conflict].facts);
  check(byPath[plan.target + "/gone.txt"].kind === "deleted", "the deleted file");
  const bidi = byPath[plan.bidiName];
  check(bidi && bidi.shown === asShown(plan.bidiName) && bidi.nameMarked.includes("\u27e8U+202E\u27e9"),
    "the name with a bidi override is not shown with it marked: " + JSON.stringify(bidi));
  check(bidi.warnings.some(w => w.startsWith("Look closely at the name")), "no warning about the name: " + bidi.warnings);
  check(byPath[plan.fifo].warnings.some(w => w.startsWith("Apply refuses this: ")), "the fifo is not marked as refused: " + byPath[plan.fifo].warnings);
  check(await page.locator("img").count() === 0, "markup from the sandbox made an element");
  check(await page.locator("script").count() === 1, "markup from the sandbox made a script element");
  const text = await page.locator("body").textContent();
  check(!rawHidden.test(text), "the page shows a raw control or bidi character");
  check(await page.locator("section.cow-mount button.apply").isDisabled(), "Apply is enabled with nothing chosen");
  await shot("change-review");

  // pick checks the box of path (by its exact path, not a CSS selector:
  // the paths hold markup).
  const pick = async path => {
    const i = await page.evaluate(p => [...document.querySelectorAll("li.change")].findIndex(li => li.dataset.path === p), path);
    check(i >= 0, "no change " + path);
    await page.locator("li.change").nth(i).locator("input.pick").check();
  };

  // A path the host changed since the sandbox started: nothing applied.
  await pick(plan.conflict);
  await mount.locator("button.apply").click();
  await page.locator("#ch-result.conflict").waitFor({ timeout: 10000 });
  const conflict = await page.locator("#ch-result").textContent();
  console.log("conflict: " + conflict);
  check(conflict.startsWith("Conflict: nothing was applied") && conflict.includes(plan.conflict + ": the host changed"), "the conflict report: " + conflict);
  await until(page, n => document.querySelectorAll("li.change").length === n && !document.querySelector("input.pick:checked"), plan.paths.length, "the review redrawn, nothing chosen");
  await shot("change-conflict");

  // The sandbox rewrites a chosen file after the page showed it (the page
  // has not refreshed since): the apply is a conflict, nothing written,
  // and the review shows the new content.
  for (const p of plan.apply) await pick(p);
  await write(plan.img, plan.late);
  check((await mount.locator(".selected").textContent()).startsWith(plan.apply.length + " of "), "the chosen count");
  await mount.locator("button.apply").click();
  await page.locator("#ch-result.conflict").waitFor({ timeout: 10000 });
  const late = await page.locator("#ch-result").textContent();
  console.log("late: " + late);
  check(late.includes(plan.img + ": the sandbox changed it after it was shown") && !late.includes(plan.edit), "the report of the rewritten file: " + late);
  // Nothing was applied: every change still pending, the rewritten one
  // with its new content.
  await until(page, ([p, l, n]) => document.querySelectorAll("li.change").length === n &&
    [...document.querySelectorAll("li.change")].some(li => li.dataset.path === p && li.querySelector("pre.unified").textContent.includes("+" + l.trim())),
    [plan.img, plan.late, plan.paths.length], "every change still pending, the rewritten file's new content in the review");
  await shot("change-late");

  // Apply the two, as now shown.
  for (const p of plan.apply) await pick(p);
  await mount.locator("button.apply").click();
  await page.locator("#ch-result.applied").waitFor({ timeout: 10000 });
  const applied = await page.evaluate(() => [...document.querySelectorAll("#ch-result ul.report")[0].querySelectorAll("li .path")].map(s => s.textContent));
  console.log("applied: " + JSON.stringify(applied));
  check(JSON.stringify([...applied].sort()) === JSON.stringify([...plan.apply].sort()), "applied " + applied);
  const left = plan.paths.filter(p => !plan.apply.includes(p));
  await until(page, n => document.querySelectorAll("li.change").length === n, left.length, "the applied changes gone from the review");
  // The badge counts what is left at once (the clock has not moved).
  await until(page, n => document.getElementById("changes-count").textContent === String(n), left.length, "the badge to count what is left");
  await shot("change-applied");

  // A change while the review shows: the next refresh shows it, and says so.
  // What was ticked stays ticked, unless it moved.
  check(await page.locator("#ch-updated").isHidden(), "the review says it changed before it did");
  const gone = plan.target + "/gone.txt";
  await pick(gone);
  await pick(plan.inner);
  await write(plan.inner, "inner, changed while shown\n");
  await page.clock.runFor(5000);
  await page.locator("#ch-updated:not([hidden])").waitFor({ timeout: 10000 });
  await until(page, () => [...document.querySelectorAll("pre.unified")].some(p => p.textContent.includes("+inner, changed while shown")), null, "the new content of the file changed while shown");
  const ticked = await page.evaluate(() => [...document.querySelectorAll("input.pick:checked")].map(b => b.dataset.path));
  check(JSON.stringify(ticked) === JSON.stringify([gone]), "ticked after the redraw: " + ticked + ", want only " + gone);

  // Discard the rest (two clicks: the button asks to confirm).
  await mount.locator("input.pick-all").check();
  check((await mount.locator(".selected").textContent()).startsWith(left.length + " of " + left.length), "every change chosen");
  await mount.locator("button.discard").click();
  await mount.locator("button.discard.armed").click();
  await page.locator("#ch-result.discarded").waitFor({ timeout: 10000 });
  const discarded = await page.evaluate(() => [...document.querySelectorAll("#ch-result ul.report li .path")].map(s => s.textContent));
  console.log("discarded: " + JSON.stringify(discarded));
  check(left.every(p => discarded.includes(asShown(p))), "discarded " + discarded + ", want " + left.map(asShown));
  await mount.locator("p.none").waitFor({ timeout: 10000 });
  await shot("change-discarded");

  // The list is empty.
  await page.click('#nav a[data-view="changes"]');
  await page.locator("#changes-none:not([hidden])").waitFor({ timeout: 10000 });
  check(await page.locator("tr.pending-change").count() === 0, "the list still has rows");
  await page.locator("#changes-count[hidden]").waitFor({ state: "attached", timeout: 5000 });
  await shot("changes-empty");

  // The audit log names what the operator applied.
  await page.click('#nav a[data-view="audit"]');
  await page.selectOption("#a-kind", "cow_apply");
  await page.fill("#a-sandbox", plan.sandbox);
  await page.click("#a-apply");
  // Only the sandbox's cow_apply events (the filter took), newest first.
  await until(page, () => {
    const rows = [...document.querySelectorAll("#audit-log tr.event")];
    return rows.length > 0 && rows.every(r => r.dataset.kind === "cow_apply");
  }, null, "only cow_apply events in the audit log");
  check(await page.locator("#app-error").textContent() === "", "the audit filter: " + await page.locator("#app-error").textContent());
  const ev = page.locator('#audit-log tr.event[data-kind="cow_apply"]').first();
  const what = await ev.locator("td.what").textContent();
  console.log("audit: " + what);
  check(what.startsWith(plan.target + " of " + plan.source + ": 2 paths") && what.includes(plan.img) && what.includes(plan.edit), "the audit log's apply: " + what);
  if (problems.length) throw new Error(problems.join("; "));
  console.log("RESULT " + JSON.stringify({ applied, discarded }));
} catch (e) {
  console.log("FAIL: " + e.message);
  failed = true;
  // Where the page was, for the log and the artifacts.
  if (page) {
    const at = await page.evaluate(() => location.hash + " | error: " + document.getElementById("app-error").textContent).catch(err => String(err));
    console.log("page: " + at);
    await page.screenshot({ path: outDir + "/failure.png", fullPage: true }).catch(() => {});
  }
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);

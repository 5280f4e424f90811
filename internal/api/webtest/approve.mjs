// approve.mjs URL KEY: logs in to the airlock approvals page in headless
// Chromium with an operator key, waits for a pending approval, checks that
// its code is shown as text (not run as HTML), and approves it with one
// click. Prints "approved <id>" and exits 0, or prints why and exits 1.
// Run by internal/api's TestApprovalPageInChromium.
import { chromium } from "playwright-core";

const [url, key] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
let failed = false;
try {
  const page = await browser.newPage();
  const problems = [];
  page.on("pageerror", e => problems.push("page error: " + e.message));
  // A 401 while not logged in is expected; a CSP violation is not.
  page.on("console", m => { if (m.type() === "error" && m.text().includes("Content Security Policy")) problems.push("console: " + m.text()); });
  page.on("dialog", d => { problems.push("a dialog opened: script from the code ran"); d.dismiss(); });
  await page.goto(url + "/ui/#/approvals");
  await page.fill("#key", key);
  await page.click("#login-button");
  const item = page.locator('li.approval[data-state="pending"]').first();
  await item.waitFor({ timeout: 15000 });
  const code = await item.locator("pre.code").textContent();
  const rule = await item.locator(".rule").textContent();
  const sandbox = await item.locator(".sandbox").textContent();
  const injected = await page.locator("img#pwned").count();
  console.log(JSON.stringify({ code, rule, sandbox, injected }));
  if (!code.includes("<img id=pwned")) throw new Error("the code is not shown as text: " + code);
  if (injected !== 0) throw new Error("the code was rendered as HTML");
  const id = await item.getAttribute("data-id");
  await item.locator("input.reason").fill("ok from the browser");
  await item.locator("button.approve").click();
  await page.locator(`li.approval[data-id="${id}"][data-state="approved"]`).waitFor({ timeout: 10000 });
  // The audit table shows the approval.
  await page.locator("#audit tr.event td.kind", { hasText: "approval" }).first().waitFor({ timeout: 10000 });
  if (problems.length) throw new Error(problems.join("; "));
  console.log("approved " + id);
} catch (e) {
  console.log("FAIL: " + e.message);
  failed = true;
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);

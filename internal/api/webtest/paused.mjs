// paused.mjs URL KEY ID: logs in to the airlock console in headless
// Chromium with an operator key, checks that sandbox ID is listed as
// paused with a Resume button (and no Extend or Pause), that its page says
// so, and resumes it with one click from the list; then the row shows it
// running with Pause and Extend. Prints "resumed <id>" and exits 0, or
// prints why and exits 1. Run by internal/api's TestConsolePausedInChromium.
import { chromium } from "playwright-core";

const [url, key, id] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
let failed = false;
try {
  const page = await browser.newPage();
  const problems = [];
  page.on("pageerror", e => problems.push("page error: " + e.message));
  page.on("console", m => { if (m.type() === "error" && m.text().includes("Content Security Policy")) problems.push("console: " + m.text()); });
  await page.goto(url + "/ui/#/sandboxes");
  await page.fill("#key", key);
  await page.click("#login-button");
  const row = page.locator(`#sandboxes tr.sandbox[data-id="${id}"]`);
  await row.locator('td.state[data-state="paused"]').waitFor({ timeout: 15000 });
  const visible = async sel => row.locator(sel).isVisible();
  const before = { resume: await visible("button.resume"), pause: await visible("button.pause"), extend: await visible("button.extend"),
    kill: await visible("button.kill"), ttl: await row.locator("td").nth(6).textContent() };
  console.log("paused row: " + JSON.stringify(before));
  if (!before.resume || before.pause || before.extend || !before.kill) throw new Error("a paused row's buttons: " + JSON.stringify(before));
  if (!/stored; ends in/.test(before.ttl)) throw new Error("a paused row's TTL cell says " + before.ttl);
  // Only paused sandboxes under the state filter.
  await page.selectOption("#f-state", "paused");
  await row.waitFor({ timeout: 10000 });
  // Its page says paused, with a Resume button.
  await page.goto(url + "/ui/#/sandbox/" + id);
  await page.locator('#sd-state[data-state="paused"]').waitFor({ timeout: 10000 });
  await page.locator("#sd-resume").waitFor({ timeout: 10000 });
  const info = await page.locator("#sd-info").textContent();
  if (!info.includes("Paused")) throw new Error("its page does not say when it was paused: " + info);
  await page.goto(url + "/ui/#/sandboxes");
  await page.selectOption("#f-state", "live");
  await row.locator("button.resume").click();
  await row.locator('td.state[data-state="running"]').waitFor({ timeout: 10000 });
  const after = { resume: await visible("button.resume"), pause: await visible("button.pause"), extend: await visible("button.extend") };
  console.log("running row: " + JSON.stringify(after));
  if (after.resume || !after.pause || !after.extend) throw new Error("a running row's buttons: " + JSON.stringify(after));
  if (problems.length) throw new Error(problems.join("; "));
  console.log("resumed " + id);
} catch (e) {
  console.log("FAIL: " + e.message);
  failed = true;
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);

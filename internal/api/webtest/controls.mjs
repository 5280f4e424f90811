// controls.mjs URL KEY: logs in to the approvals page in headless Chromium
// and checks that a pending approval whose argv holds control, bidi and
// zero-width characters is shown with each of them as a visible escape
// (what the operator reads is what runs), its argv as a JSON list, and a
// warning. Prints "ok" and exits 0, or prints why and exits 1. Run by
// internal/api's TestApprovalPageShowsControls.
import { chromium } from "playwright-core";

const [url, key] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
let failed = false;
try {
  const page = await browser.newPage();
  await page.goto(url + "/ui/#/approvals");
  await page.fill("#key", key);
  await page.click("#login-button");
  const item = page.locator('li.approval[data-state="pending"]').first();
  await item.waitFor({ timeout: 15000 });
  // The audit table fills on the same refresh.
  await page.locator("#audit tr.event").first().waitFor({ timeout: 10000 });
  const shown = await item.locator("pre.code").textContent();
  const warning = await item.locator(".warning").count();
  const all = await page.locator("body").textContent();
  console.log(JSON.stringify({ shown, warning }));
  const hidden = [...all].filter(c => /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/.test(c));
  if (hidden.length) throw new Error("the page shows raw control or bidi characters: " + hidden.map(c => "U+" + c.codePointAt(0).toString(16)).join(" "));
  for (const want of ["\u27e8U+202E\u27e9", "\u27e8U+200B\u27e9", "\u27e8U+0007\u27e9", '["echo","NEEDS-APPROVAL","safe-looking ']) {
    if (!shown.includes(want)) throw new Error("the argv is not shown with " + want + ": " + shown);
  }
  if (warning !== 1) throw new Error("no warning that the command holds invisible characters");
  console.log("ok");
} catch (e) {
  console.log("FAIL: " + e.message);
  failed = true;
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);

// The dashboard's sandbox list shows a sandbox that is fetching its image
// (a create with wait: false, state pulling) with its pull's phase, layers
// done and bytes fetched of total, refreshed while it pulls. The image comes
// from a test registry on loopback (internal/image/registry/registrytest/serve)
// that serves the first 64 KiB of each blob and then stalls, so the pull stays
// in flight while the page is read.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const URL = process.env.DSEC_URL;
const TOKEN = process.env.DSEC_TOKEN;
const ART = process.env.DSEC_UI_ARTIFACTS;
const PORT = Number(process.env.DSEC_UI_REGISTRY_PORT);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const tmp = mkdtempSync(path.join(tmpdir(), "ui-pulls-"));
let browser, registry, ref;
const created = [];

async function apiCall(method, p, body) {
  const resp = await fetch(URL + p, {
    method,
    headers: { Authorization: "Bearer " + TOKEN, "Content-Type": "application/json" },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await resp.text();
  if (!resp.ok) throw new Error(`${method} ${p}: ${resp.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

before(async () => {
  assert.ok(PORT > 0, "DSEC_UI_REGISTRY_PORT (run.sh) names the registry port");
  execFileSync(process.env.GO || "go", ["build", "-o", path.join(tmp, "serve"), "./internal/image/registry/registrytest/serve"], { cwd: root, stdio: "inherit" });
  registry = spawn(path.join(tmp, "serve"), ["-listen", `127.0.0.1:${PORT}`, "-stall", String(64 << 10), "-repo", "ui/stalled:1"], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  ref = await new Promise((resolve, reject) => {
    let out = "";
    registry.stdout.on("data", (b) => {
      out += b;
      const m = out.match(/^ready (\S+)\n/);
      if (m) resolve(m[1]);
    });
    registry.on("exit", (code) => reject(new Error(`test registry exited ${code}: ${out}`)));
  });
  browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}, { timeout: 300000 });

after(async () => {
  await browser?.close();
  for (const id of created) await apiCall("DELETE", "/v1/sandboxes/" + id).catch(() => {});
  registry?.stdin.end();
  rmSync(tmp, { recursive: true, force: true });
});

test("a sandbox pulling its image shows bytes fetched of total", async () => {
  const sb = await apiCall("POST", "/v1/sandboxes", { image: ref, wait: false, labels: { uitest: "pulls" } });
  created.push(sb.id);
  assert.equal(sb.state, "pulling");
  // The registry stalls each layer after 64 KiB: wait until the node has them.
  let got;
  for (let i = 0; i < 200; i++) {
    got = await apiCall("GET", "/v1/sandboxes/" + sb.id);
    if (got.pull?.fetched_bytes > 0 && (got.pull.layers ?? []).length === 2) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(got.state, "pulling");
  assert.ok(got.pull.fetched_bytes > 0 && got.pull.fetched_bytes < got.pull.total_bytes, JSON.stringify(got.pull));

  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const p = await ctx.newPage();
  await p.goto(URL + "/ui/#token=" + encodeURIComponent(TOKEN));
  await p.getByTestId("overview").waitFor();
  await p.goto(URL + "/ui/#/sandboxes?state=pulling");
  const cell = p.locator(`[data-pull="${sb.id}"]`);
  await cell.waitFor();
  const text = await cell.textContent();
  assert.match(text, /^fetching, [01]\/2 layers, [\d.]+ KiB of [\d.]+ [KM]iB$/, text);
  // The list follows the pull: the same cell is drawn again while it pulls.
  await p.evaluate((id) => (document.querySelector(`[data-pull="${id}"]`).dataset.seen = "1"), sb.id);
  await p.waitForFunction((id) => document.querySelector(`[data-pull="${id}"]`)?.dataset.seen !== "1", sb.id, { timeout: 5000 });
  await p.screenshot({ path: `${ART}/pulls-sandboxes.png`, fullPage: true });
  await ctx.close();
});

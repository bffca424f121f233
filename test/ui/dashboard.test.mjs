// The dashboard in headless Chromium against a real dsec server (run.sh starts
// it): token handling, the overview, filters, the terminal, and the first paint
// with 10,000 sandboxes (mocknode).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const URL = process.env.DSEC_URL;
const TOKEN = process.env.DSEC_TOKEN;
const MOCK_URL = process.env.DSEC_MOCK_URL;
const MOCK_N = Number(process.env.DSEC_MOCK_N || 0);
const ART = process.env.DSEC_UI_ARTIFACTS;
const RUN = Math.random().toString(36).slice(2, 8);

// The flags the machine needs: no sandbox as root, and no background traffic
// (this network refuses it).
const FLAGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

let browser;
const created = [];

async function apiCall(method, path, body) {
  const resp = await fetch(URL + path, {
    method,
    headers: { Authorization: "Bearer " + TOKEN, "Content-Type": "application/json" },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await resp.text();
  if (!resp.ok) throw new Error(`${method} ${path}: ${resp.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

async function sandbox(labels) {
  const sb = await apiCall("POST", "/v1/sandboxes", { image: "busybox", labels });
  created.push(sb.id);
  return sb;
}

async function page(name) {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const p = await ctx.newPage();
  p.shot = (step) => p.screenshot({ path: `${ART}/${name}-${step}.png`, fullPage: true });
  return p;
}

before(async () => {
  browser = await chromium.launch({ executablePath: "/usr/bin/chromium", headless: true, args: FLAGS });
});

after(async () => {
  await browser?.close();
  for (const id of created) await apiCall("DELETE", "/v1/sandboxes/" + id).catch(() => {});
});

test("a wrong token is refused with a clear message", async () => {
  const p = await page("wrong-token");
  await p.goto(URL + "/ui/#token=not-the-token");
  const msg = p.getByTestId("login-error");
  await msg.waitFor();
  assert.match(await msg.textContent(), /refused this token \(401 unauthorized/);
  assert.equal(new globalThis.URL(p.url()).hash.includes("not-the-token"), false, "the token left the URL");
  assert.equal(await p.evaluate(() => localStorage.getItem("dsec.token")), null, "a refused token is not kept");
  await p.shot("login");
  // Entering the right one in the form opens the dashboard.
  await p.fill("#token", TOKEN);
  await p.click("button[type=submit]");
  await p.getByTestId("overview").waitFor();
  await p.context().close();
});

test("the overview lists the node and a sandbox created by the test", async () => {
  const info = await apiCall("GET", "/v1/info");
  const sb = await sandbox({ uitest: RUN, role: "overview" });
  const p = await page("overview");
  await p.goto(URL + "/ui/#token=" + encodeURIComponent(TOKEN));
  await p.getByTestId("overview").waitFor();
  assert.equal(await p.evaluate(() => localStorage.getItem("dsec.token")), TOKEN, "the token is kept");
  assert.equal(new globalThis.URL(p.url()).hash, "#/", "the token left the URL");
  const nodes = await p.getByTestId("node-name").allTextContents();
  assert.deepEqual(nodes, [info.node]);
  const nodeRow = await p.getByTestId("nodes").locator("tbody tr").first().textContent();
  assert.match(nodeRow, /container/);
  assert.match(await p.getByTestId("rates").textContent(), /[1-9]\d* creates/, "the create is counted");
  await p.shot("overview");
  // Reload: the stored token is used, no fragment needed.
  await p.goto(URL + "/ui/#/sandboxes");
  await p.getByTestId("sandbox-table").waitFor();
  const ids = await p.getByTestId("sandbox-id").allTextContents();
  assert.ok(ids.includes(sb.id), `${sb.id} in ${ids}`);
  await p.shot("sandboxes");
  await p.context().close();
});

test("a filter narrows the list", async () => {
  const a = await sandbox({ uitest: RUN, filter: "a" });
  const b = await sandbox({ uitest: RUN, filter: "b" });
  const p = await page("filter");
  await p.goto(URL + "/ui/#token=" + encodeURIComponent(TOKEN));
  await p.getByTestId("overview").waitFor();
  await p.goto(URL + "/ui/#/sandboxes");
  await p.getByTestId("sandbox-table").waitFor();
  let ids = await p.getByTestId("sandbox-id").allTextContents();
  assert.ok(ids.includes(a.id) && ids.includes(b.id), "both listed unfiltered");
  await p.fill("input[name=label]", "filter=a");
  await p.click(".filters button[type=submit]");
  await p.waitForFunction(() => location.hash.includes("label=filter"));
  await p.waitForFunction((bid) => {
    const t = document.querySelector("[data-testid=sandbox-table]");
    return t && !t.textContent.includes(bid);
  }, b.id);
  ids = await p.getByTestId("sandbox-id").allTextContents();
  assert.deepEqual(ids, [a.id]);
  assert.match(await p.getByTestId("count").textContent(), /of 1$/);
  await p.shot("filtered");
  // A value the server refuses shows its message.
  await p.goto(URL + "/ui/#/sandboxes?state=sleeping");
  const err = p.locator(".error");
  await err.waitFor();
  assert.match(await err.textContent(), /invalid_argument: .*unknown value "sleeping"/);
  await p.context().close();
});

async function openTerminal(p, id) {
  await p.goto(URL + "/ui/#token=" + encodeURIComponent(TOKEN));
  await p.getByTestId("overview").waitFor();
  await p.goto(URL + "/ui/#/terminal/" + encodeURIComponent(id));
  await p.getByTestId("terminal").waitFor();
}

const screenText = (p) => p.evaluate(() => document.querySelector(".xterm-rows")?.textContent ?? "");

test("the terminal runs echo in the sandbox and the answer appears on the page", async () => {
  const sb = await sandbox({ uitest: RUN, role: "terminal" });
  const p = await page("terminal");
  await openTerminal(p, sb.id);
  await p.waitForFunction(() => document.querySelector("[data-testid=term-status]")?.textContent.startsWith("connected"));
  await p.click(".xterm");
  // The answer (the sum and the sandbox's host name) is not in what was typed.
  await p.keyboard.type("echo dsec-$((6*7))-$(hostname)\n");
  const want = `dsec-42-${sb.id.split(".")[0]}`;
  await p.waitForFunction((w) => document.querySelector(".xterm-rows")?.textContent.includes(w), want, { timeout: 20000 })
    .catch(async (e) => {
      await p.shot("echo-failed");
      throw new Error(`screen: ${await screenText(p)}: ${e}`);
    });
  await p.shot("echo");
  // Typing exit ends the shell; the page says so.
  await p.keyboard.type("exit 3\n");
  const status = p.getByTestId("term-status");
  await p.waitForFunction(() => document.querySelector("[data-testid=term-status]")?.dataset.closed);
  assert.match(await status.textContent(), /Terminal closed: the shell exited with code 3/);
  await p.context().close();
});

test("a terminal for a deleted sandbox closes with a clear message", async () => {
  const sb = await sandbox({ uitest: RUN, role: "deleted" });
  const p = await page("deleted");
  await openTerminal(p, sb.id);
  await p.waitForFunction(() => document.querySelector("[data-testid=term-status]")?.textContent.startsWith("connected"));
  await apiCall("DELETE", "/v1/sandboxes/" + sb.id);
  await p.waitForFunction(() => document.querySelector("[data-testid=term-status]")?.dataset.closed, null, { timeout: 30000 });
  const status = await p.getByTestId("term-status").textContent();
  assert.match(status, new RegExp(`Terminal closed: not_found: sandbox ${sb.id.replace(".", "\\.")} (was deleted|does not exist)`));
  await p.shot("deleted-while-open");
  // Opening it again: refused at once, same message.
  await p.goto(URL + "/ui/#/sandboxes");
  await p.goto(URL + "/ui/#/terminal/" + encodeURIComponent(sb.id));
  await p.waitForFunction(() => document.querySelector("[data-testid=term-status]")?.dataset.closed);
  assert.match(await p.getByTestId("term-status").textContent(), /Terminal closed: not_found: .*(was deleted|does not exist)/);
  assert.equal(await p.getByTestId("term-status").getAttribute("data-closed"), "4404");
  await p.shot("deleted");
  await p.context().close();
});

// First paint with MOCK_N sandboxes: the overview (one JSON call) and the first
// page of the list (one paged call), each timed from navigation start to the
// rendered data, in a fresh page with the token in storage.
test(`first paint with ${MOCK_N} sandboxes is under 1 s`, async () => {
  assert.ok(MOCK_URL, "mocknode is running");
  const p = await page("10k");
  await p.goto(MOCK_URL + "/ui/#token=" + encodeURIComponent(TOKEN));
  await p.getByTestId("overview").waitFor();
  const results = {};
  for (const [view, hash] of [["overview", "#/"], ["sandboxes", "#/sandboxes"]]) {
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    await ctx.addInitScript((tok) => localStorage.setItem("dsec.token", tok), TOKEN);
    const q = await ctx.newPage();
    const calls = [];
    q.on("request", (r) => {
      const u = new globalThis.URL(r.url());
      if (u.pathname.startsWith("/v1/") || u.pathname.startsWith("/ui/api/")) calls.push(u.pathname + u.search);
    });
    await q.goto(MOCK_URL + "/ui/" + hash);
    await q.waitForFunction((v) => document.body.dataset.ready === v, view, { timeout: 10000 });
    const t = await q.evaluate(() => {
      const nav = performance.getEntriesByType("navigation")[0];
      const fcp = performance.getEntriesByName("first-contentful-paint")[0];
      return { ready_ms: performance.now() - nav.startTime, fcp_ms: fcp ? fcp.startTime : null };
    });
    // One more frame: the data is on screen.
    await q.evaluate(() => new Promise((r) => requestAnimationFrame(() => r())));
    await q.screenshot({ path: `${ART}/10k-${view}.png` });
    results[view] = { ...t, calls };
    await ctx.close();
  }
  console.log("first paint with %d sandboxes: %s", MOCK_N, JSON.stringify(results));
  for (const [view, r] of Object.entries(results)) {
    assert.ok(r.ready_ms <= 1000, `${view}: data on screen after ${r.ready_ms.toFixed(0)} ms`);
    assert.ok(r.calls.length <= 1, `${view}: ${r.calls.length} API calls on load: ${r.calls}`);
  }
  const total = await (async () => {
    const ctx = await browser.newContext();
    await ctx.addInitScript((tok) => localStorage.setItem("dsec.token", tok), TOKEN);
    const q = await ctx.newPage();
    await q.goto(MOCK_URL + "/ui/#/");
    await q.waitForFunction(() => document.body.dataset.ready === "overview");
    const v = await q.locator(".card .value").first().textContent();
    await ctx.close();
    return Number(v);
  })();
  assert.equal(total, MOCK_N);
  await p.context().close();
});

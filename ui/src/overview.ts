import { api, Overview } from "./api";
import { bytes, h, pct, table } from "./dom";
import { errorBox, refused, View } from "./main";

const REFRESH_MS = 5000;

export function overview(app: HTMLElement): View {
  let timer = 0;
  let stopped = false;
  const load = async () => {
    try {
      const ov = await api<Overview>("/ui/api/overview");
      if (stopped) return;
      app.replaceChildren(render(ov));
      document.body.dataset.ready = "overview";
    } catch (err) {
      if (stopped || refused(err)) return;
      app.replaceChildren(errorBox(err));
    }
    if (!stopped) timer = window.setTimeout(load, REFRESH_MS);
  };
  app.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  load();
  return {
    stop: () => {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

function render(ov: Overview): HTMLElement {
  const s = ov.sandboxes;
  const card = (label: string, value: string | number, href?: string) =>
    h("a", { class: "card", href: href ?? "#/sandboxes" }, h("div", { class: "value" }, value), h("div", { class: "caption" }, label));
  return h(
    "div",
    { "data-testid": "overview" },
    h("h1", {}, "Overview"),
    h(
      "section",
      { class: "cards" },
      card("sandboxes", s.total),
      ["running", "paused", "exited"].map((st) => card(st, s.by_state[st] ?? 0, "#/sandboxes?state=" + st)),
      Object.entries(s.by_backend).map(([b, n]) => card(b, n, "#/sandboxes?backend=" + b)),
    ),
    h("h2", {}, `Nodes (${ov.nodes.length})`),
    table(
      ["node", "state", "backends", "CPUs", "load (1m)", "memory available", "sandboxes", "running", "CPU allocated", "memory allocated"],
      ov.nodes.map((n) => [
        h("a", { href: "#/sandboxes?node=" + encodeURIComponent(n.name), "data-testid": "node-name", title: n.addr ?? "" }, n.name),
        h("span", { class: "state-" + (n.state ?? "ready"), "data-testid": "node-state" }, n.state ?? "ready"),
        (n.backends ?? []).join(", "),
        n.cpus,
        n.load1.toFixed(2),
        `${bytes(n.memory_available_bytes)} of ${bytes(n.memory_bytes)}`,
        n.max_sandboxes ? `${n.sandboxes} of ${n.max_sandboxes}` : n.sandboxes,
        n.running,
        `${n.cpu_allocated.toFixed(1)} (${pct(n.cpu_allocated, n.cpus)})`,
        `${bytes(n.memory_allocated_bytes)} (${pct(n.memory_allocated_bytes, n.memory_bytes)})`,
      ]),
      { "data-testid": "nodes" },
    ),
    ov.rates ? rates(ov.rates) : null,
    h("h2", {}, "FnCall pools"),
    ov.pools.length
      ? table(
          ["image", "slots", "busy"],
          ov.pools.map((p) => [p.image, p.slots, `${p.busy} (${pct(p.busy, p.slots)})`]),
        )
      : h("p", { class: "muted" }, "No FnCall pool has started yet (pools start on the first call)."),
  );
}

function rates(r: NonNullable<Overview["rates"]>): HTMLElement {
  const n = r.creates.length;
  const max = Math.max(1, ...r.creates);
  const W = 600,
    H = 80,
    bw = W / n;
  const svgNS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(svgNS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("class", "chart");
  svg.setAttribute("role", "img");
  r.creates.forEach((c, i) => {
    const ok = c - r.create_errors[i];
    const bar = (y: number, height: number, cls: string) => {
      const rect = document.createElementNS(svgNS, "rect");
      rect.setAttribute("x", String(i * bw + 1));
      rect.setAttribute("width", String(Math.max(1, bw - 2)));
      rect.setAttribute("y", String(y));
      rect.setAttribute("height", String(height));
      rect.setAttribute("class", cls);
      const title = document.createElementNS(svgNS, "title");
      title.textContent = `${c} creates, ${r.create_errors[i]} failed`;
      rect.append(title);
      svg.append(rect);
    };
    const hOk = (H * ok) / max,
      hErr = (H * r.create_errors[i]) / max;
    if (ok > 0) bar(H - hOk, hOk, "ok");
    if (r.create_errors[i] > 0) bar(H - hOk - hErr, hErr, "err");
  });
  const total = r.creates.reduce((a, b) => a + b, 0);
  const errs = r.create_errors.reduce((a, b) => a + b, 0);
  const minutes = (n * r.interval_seconds) / 60;
  return h(
    "section",
    {},
    h("h2", {}, `Creates over the last ${minutes} minutes`),
    h(
      "p",
      { "data-testid": "rates" },
      `${total} creates (${(total / minutes).toFixed(1)}/min), ${errs} failed (${pct(errs, total)}); one bar per ${r.interval_seconds}s`,
    ),
    svg,
  );
}

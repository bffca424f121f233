import { api, apiBlob, Sandbox, SandboxPage, Usage } from "./api";
import { ago, bytes, h, table } from "./dom";
import { errorBox, refused, View } from "./main";

const PAGE = 50;
const FILTERS = ["label", "state", "backend", "node"] as const;

/** sandboxes lists one page (newest first) of the sandboxes matching the
 * filters in the route's query; paging walks next_cursor. */
export function sandboxes(app: HTMLElement, params: URLSearchParams): View {
  let stopped = false;
  const cursors: string[] = [""]; // cursors[i] starts page i
  let page = 0;
  let again: ReturnType<typeof setTimeout> | undefined;

  const form = filterForm(params);
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  // The latest screenshot of a sandbox with a display (FullVM), shown when its "screen" button is pressed.
  const screen = h("figure", { class: "screen", "data-testid": "screen" });
  app.replaceChildren(h("div", { "data-testid": "sandboxes" }, h("h1", {}, "Sandboxes"), form, screen, body));
  let shown = "";
  const showScreen = async (id: string) => {
    try {
      const png = await apiBlob("/v1/sandboxes/" + encodeURIComponent(id) + "/screen");
      if (stopped) return;
      if (shown) URL.revokeObjectURL(shown);
      shown = URL.createObjectURL(png);
      screen.replaceChildren(
        h("img", { src: shown, alt: "screen of " + id, "data-testid": "screen-img" }),
        h("figcaption", {}, `${id}, ${new Date().toLocaleTimeString()} `, h("button", { type: "button", onclick: () => showScreen(id) }, "refresh")),
      );
    } catch (err) {
      if (stopped || refused(err)) return;
      screen.replaceChildren(errorBox(err));
    }
  };

  const load = async () => {
    const q = new URLSearchParams();
    for (const f of FILTERS) for (const v of params.getAll(f)) if (v) q.append(f, v);
    q.set("limit", String(PAGE));
    q.set("order", "desc");
    if (cursors[page]) q.set("cursor", cursors[page]);
    try {
      const res = await api<SandboxPage>("/v1/sandboxes?" + q.toString());
      if (stopped) return;
      cursors[page + 1] = res.next_cursor ?? "";
      body.replaceChildren(list(res));
      document.body.dataset.ready = "sandboxes";
      fillUsage(res);
      // A sandbox fetching its image: follow its progress until it runs.
      clearTimeout(again);
      if (res.sandboxes.some((sb) => sb.state === "pulling")) again = setTimeout(load, 1000);
    } catch (err) {
      if (stopped || refused(err)) return;
      body.replaceChildren(errorBox(err));
    }
  };

  const list = (res: SandboxPage) => {
    const first = page * PAGE + 1;
    const last = page * PAGE + res.sandboxes.length;
    const pager = h(
      "div",
      { class: "pager" },
      h("span", { "data-testid": "count" }, res.total ? `${first}–${last} of ${res.total}` : "no sandboxes match"),
      h("button", { type: "button", disabled: page === 0, onclick: () => ((page -= 1), load()) }, "← newer"),
      h("button", { type: "button", disabled: !res.next_cursor, onclick: () => ((page += 1), load()) }, "older →"),
    );
    return h(
      "div",
      {},
      pager,
      table(
        ["id", "state", "backend", "image", "CPU used / limit", "memory used / limit", "created", "labels", "", ""],
        res.sandboxes.map((sb) => [
          h("code", { "data-testid": "sandbox-id" }, sb.id),
          stateCell(sb),
          sb.backend,
          sb.image,
          h("span", { "data-cpu": sb.id }, "– / " + sb.cpu + (sb.cpu_class ? " " + sb.cpu_class : "")),
          h("span", { "data-mem": sb.id }, "– / " + bytes(sb.memory_bytes)),
          h("span", { title: sb.created_at }, ago(sb.created_at)),
          Object.entries(sb.labels ?? {}).map(([k, v]) => h("span", { class: "label" }, `${k}=${v}`)),
          sb.state === "running"
            ? h("a", { href: "#/terminal/" + encodeURIComponent(sb.id), class: "button", "data-testid": "open-terminal" }, "terminal")
            : "",
          sb.screen && sb.state === "running"
            ? h("button", { type: "button", "data-testid": "open-screen", onclick: () => showScreen(sb.id) }, "screen")
            : "",
        ]),
        { "data-testid": "sandbox-table" },
      ),
    );
  };

  // The page's CPU and memory use: one call for the whole page, after it is on
  // screen (the first paint does not wait for it).
  const fillUsage = async (res: SandboxPage) => {
    const running = res.sandboxes.filter((sb) => sb.state !== "exited");
    if (!running.length) return;
    const q = new URLSearchParams();
    for (const sb of running) q.append("id", sb.id);
    try {
      const u = await api<{ sandboxes: Usage[] }>("/ui/api/usage?" + q.toString());
      if (stopped) return;
      const limits = new Map(res.sandboxes.map((sb) => [sb.id, sb]));
      for (const x of u.sandboxes) {
        const sb = limits.get(x.id)!;
        const cpu = body.querySelector(`[data-cpu="${CSS.escape(x.id)}"]`);
        const mem = body.querySelector(`[data-mem="${CSS.escape(x.id)}"]`);
        if (cpu && x.cpu_seconds >= 0)
          cpu.textContent =
            (x.cpu_percent !== undefined ? x.cpu_percent.toFixed(0) + "%" : x.cpu_seconds.toFixed(1) + "s") + " / " + sb.cpu;
        if (mem && x.memory_bytes >= 0) mem.textContent = bytes(x.memory_bytes) + " / " + bytes(sb.memory_bytes);
      }
    } catch {
      /* usage is optional (a server without it answers not_implemented) */
    }
  };

  load();
  return {
    stop: () => {
      stopped = true;
      clearTimeout(again);
      if (shown) URL.revokeObjectURL(shown);
    },
  };
}

function filterForm(params: URLSearchParams): HTMLElement {
  const input = (name: string, placeholder: string) =>
    h("input", { name, placeholder, value: params.get(name) ?? "", "aria-label": name });
  const select = (name: string, options: string[]) => {
    const s = h(
      "select",
      { name, "aria-label": name },
      h("option", { value: "" }, "any " + name),
      options.map((o) => h("option", { value: o }, o)),
    ) as HTMLSelectElement;
    s.value = params.get(name) ?? "";
    return s;
  };
  const form = h(
    "form",
    {
      class: "filters",
      onsubmit: (ev: Event) => {
        ev.preventDefault();
        const q = new URLSearchParams();
        for (const [k, v] of new FormData(form)) if (typeof v === "string" && v.trim()) q.set(k, v.trim());
        const qs = q.toString();
        location.hash = "#/sandboxes" + (qs ? "?" + qs : "");
      },
    },
    input("label", "label KEY=VALUE"),
    select("state", ["running", "paused", "exited", "pulling", "failed"]),
    select("backend", ["container", "fncall", "microvm", "fullvm"]),
    input("node", "node"),
    h("button", { type: "submit" }, "Filter"),
  ) as HTMLFormElement;
  return form;
}

/** stateCell is a sandbox's state; one fetching its image (state pulling)
 * shows the pull's phase and bytes fetched of total, one that failed its
 * error's code (the message as a tooltip). */
function stateCell(sb: Sandbox): HTMLElement {
  const cell = h("span", { class: "state " + sb.state }, sb.state + (sb.reclaimed ? " (reclaimed)" : ""));
  if (sb.state === "pulling") {
    const p = sb.pull;
    const layers = p?.layers ?? [];
    const done = layers.filter((l) => l.phase === "done").length;
    const text = p
      ? `${p.phase}${layers.length ? `, ${done}/${layers.length} layers` : ""}, ${bytes(p.fetched_bytes)} of ${bytes(p.total_bytes)}`
      : "resolving";
    return h("span", {}, cell, " ", h("span", { class: "muted", "data-testid": "pull-progress", "data-pull": sb.id }, text));
  }
  if (sb.state === "failed" && sb.error) {
    return h("span", { title: sb.error.message }, cell, " ", h("span", { class: "muted", "data-testid": "failed-code" }, sb.error.code));
  }
  return cell;
}

import { api, Trajectory } from "./api";
import { ago, h, table } from "./dom";
import { errorBox, refused, View } from "./main";

function loadInto<T>(app: HTMLElement, path: string, render: (v: T) => HTMLElement, ready: string): View {
  let stopped = false;
  app.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  api<T>(path)
    .then((v) => {
      if (stopped) return;
      app.replaceChildren(render(v));
      document.body.dataset.ready = ready;
    })
    .catch((err) => {
      if (!stopped && !refused(err)) app.replaceChildren(errorBox(err));
    });
  return { stop: () => (stopped = true) };
}

export function trajectories(app: HTMLElement): View {
  return loadInto<{ trajectories: Trajectory[] }>(
    app,
    "/v1/trajectories",
    (res) =>
      h(
        "div",
        { "data-testid": "trajectories" },
        h("h1", {}, "Trajectories"),
        res.trajectories.length
          ? table(
              ["id", "sandbox", "steps", "last step", "replays", "divergences", "rebuilds", "updated"],
              res.trajectories.map((t) => [
                h("a", { href: "#/trajectories/" + encodeURIComponent(t.id) }, t.id),
                h("code", {}, t.sandbox_id),
                t.step_count,
                t.last_step,
                h("span", { "data-testid": "replays" }, String(t.replays ?? 0)),
                h("span", { "data-testid": "divergences" }, String(t.divergences ?? 0)),
                t.rebuilds ?? 0,
                ago(t.updated_at),
              ]),
            )
          : h("p", { class: "muted" }, "No trajectory logged yet (send X-Dsec-Trajectory and X-Dsec-Step with a step)."),
      ),
    "trajectories",
  );
}

export function trajectory(app: HTMLElement, id: string): View {
  return loadInto<Trajectory>(
    app,
    "/v1/trajectories/" + encodeURIComponent(id),
    (t) =>
      h(
        "div",
        { "data-testid": "trajectory" },
        h("h1", {}, "Trajectory ", h("code", {}, t.id)),
        h(
          "p",
          {},
          `${t.step_count} steps, ${t.replays ?? 0} replays, ${t.divergences ?? 0} divergences, ${t.rebuilds ?? 0} rebuilds; sandboxes: `,
          t.sandboxes.map((s) => h("code", { class: "label" }, s)),
        ),
        table(
          ["step", "op", "state", "status", "duration", "sandbox", ""],
          (t.steps ?? []).map((s) => [
            s.step,
            s.op,
            h("span", { class: "state " + s.state }, s.state),
            s.status ?? "",
            s.duration_ms !== undefined ? s.duration_ms.toFixed(1) + " ms" : "",
            h("code", {}, s.sandbox_id),
            s.truncated ? "answer over the log's cap: not replayable" : "",
          ]),
        ),
      ),
    "trajectory",
  );
}

// dsec dashboard: a hash router over a few views. Every view fetches what it
// shows with one or two paged calls; nothing is fetched per sandbox.
import "./style.css";
import { ApiError, clearToken, getToken, setToken, takeFragmentToken } from "./api";
import { h } from "./dom";
import { overview } from "./overview";
import { sandboxes } from "./sandboxes";
import { images } from "./images";
import { trajectories, trajectory } from "./trajectories";

export interface View {
  /** stop ends timers and connections when the route changes. */
  stop?: () => void;
}

const app = document.getElementById("app")!;
let current: View = {};

function route(): { name: string; arg: string; params: URLSearchParams } {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, query] = raw.split("?", 2);
  const [name, ...rest] = path.split("/");
  return { name: name || "overview", arg: decodeURIComponent(rest.join("/")), params: new URLSearchParams(query ?? "") };
}

/** refused shows the login form with why the last token did not work. */
export function refused(err: unknown): boolean {
  if (err instanceof ApiError && err.status === 401) {
    clearToken();
    login(
      "The server refused this token (401 unauthorized: " +
        err.message +
        "). Enter the token dsec server printed (DATA_DIR/token).",
    );
    return true;
  }
  return false;
}

/** errorBox renders a failed call's code and message. */
export function errorBox(err: unknown): HTMLElement {
  if (err instanceof ApiError) return h("div", { class: "error", role: "alert" }, `${err.code}: ${err.message}`);
  return h("div", { class: "error", role: "alert" }, String(err));
}

function login(message?: string) {
  current.stop?.();
  current = {};
  document.getElementById("logout")!.hidden = true;
  const input = h("input", {
    type: "password",
    id: "token",
    name: "token",
    placeholder: "API token",
    autocomplete: "current-password",
    required: true,
  }) as HTMLInputElement;
  const form = h(
    "form",
    {
      class: "login",
      onsubmit: (ev: Event) => {
        ev.preventDefault();
        setToken(input.value.trim());
        render();
      },
    },
    h("h1", {}, "dsec dashboard"),
    h("p", {}, "Enter the API token once; it is kept in this browser. You can also open /ui/#token=TOKEN."),
    message ? h("div", { class: "error", role: "alert", "data-testid": "login-error" }, message) : null,
    input,
    h("button", { type: "submit" }, "Open"),
  );
  app.replaceChildren(form);
  input.focus();
}

// The terminal (xterm.js) loads only when opened: the first paint does not wait for it.
function lazyTerminal(app: HTMLElement, id: string): View {
  let view: View = {};
  let stopped = false;
  app.replaceChildren(h("p", { class: "muted" }, "Loading the terminal…"));
  import("./terminal").then((m) => {
    if (!stopped) view = m.terminal(app, id);
  });
  return {
    stop: () => {
      stopped = true;
      view.stop?.();
    },
  };
}

function render() {
  current.stop?.();
  current = {};
  if (!getToken()) {
    login();
    return;
  }
  document.getElementById("logout")!.hidden = false;
  const r = route();
  for (const a of document.querySelectorAll<HTMLAnchorElement>("nav a")) {
    a.classList.toggle("active", a.dataset.nav === r.name || (r.name === "terminal" && a.dataset.nav === "sandboxes"));
  }
  const views: Record<string, () => View> = {
    overview: () => overview(app),
    sandboxes: () => sandboxes(app, r.params),
    images: () => images(app),
    trajectories: () => (r.arg ? trajectory(app, r.arg) : trajectories(app)),
    terminal: () => lazyTerminal(app, r.arg),
  };
  current = (views[r.name] ?? views.overview)();
}

document.getElementById("logout")!.addEventListener("click", () => {
  clearToken();
  login();
});
takeFragmentToken();
window.addEventListener("hashchange", () => {
  takeFragmentToken();
  render();
});
render();

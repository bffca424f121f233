import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import "@xterm/xterm/css/xterm.css";
import { getToken } from "./api";
import { h } from "./dom";
import { View } from "./main";

/** terminal opens a shell in a sandbox over /ui/api/terminal/{id} (see
 * internal/frontend/dashboard/terminal.go for the protocol). */
export function terminal(app: HTMLElement, id: string): View {
  const status = h("div", { class: "term-status", "data-testid": "term-status", role: "status" }, "connecting…");
  const box = h("div", { class: "term", "data-testid": "terminal" });
  app.replaceChildren(
    h(
      "div",
      {},
      h("h1", {}, "Terminal ", h("code", {}, id)),
      h("p", {}, h("a", { href: "#/sandboxes", class: "button" }, "← sandboxes")),
      status,
      box,
    ),
  );
  const term = new Terminal({ cursorBlink: true, fontSize: 14, convertEol: false, scrollback: 5000 });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  (window as any).dsecTerm = term; // tests read the screen buffer

  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(`${proto}//${location.host}/ui/api/terminal/${encodeURIComponent(id)}`);
  ws.binaryType = "arraybuffer";
  const enc = new TextEncoder();
  let lastError = "";
  let closed = false;

  ws.onopen = () => {
    ws.send(JSON.stringify({ token: getToken() ?? "", cols: term.cols, rows: term.rows }));
  };
  ws.onmessage = (ev) => {
    if (ev.data instanceof ArrayBuffer) {
      term.write(new Uint8Array(ev.data));
      return;
    }
    const msg = JSON.parse(ev.data);
    if (msg.type === "started") {
      status.textContent = "connected (pid " + msg.pid + ")";
      status.className = "term-status ok";
      term.focus();
    } else if (msg.type === "exit") {
      lastError = "the shell exited with code " + msg.exit_code;
    } else if (msg.type === "error") {
      lastError = `${msg.code}: ${msg.message}`;
    } else if (msg.type === "input_error") {
      term.write(`\r\n[dsec: ${msg.message}]\r\n`);
    }
  };
  ws.onclose = (ev) => {
    closed = true;
    const why = lastError || ev.reason || "connection lost (code " + ev.code + ")";
    status.textContent = "Terminal closed: " + why;
    status.className = "term-status closed";
    status.dataset.closed = String(ev.code);
    term.options.disableStdin = true;
  };
  const data = term.onData((d) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(enc.encode(d));
  });
  const resize = term.onResize(({ cols, rows }) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ resize: { cols, rows } }));
  });
  const onWindow = () => fit.fit();
  window.addEventListener("resize", onWindow);

  return {
    stop: () => {
      window.removeEventListener("resize", onWindow);
      data.dispose();
      resize.dispose();
      if (!closed) ws.close();
      term.dispose();
    },
  };
}

import { api, Image } from "./api";
import { bytes, h, pct, table } from "./dom";
import { errorBox, refused, View } from "./main";

export function images(app: HTMLElement): View {
  let stopped = false;
  app.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  api<Image[]>("/v1/images")
    .then((imgs) => {
      if (stopped) return;
      const cluster = imgs.some((im) => im.nodes);
      // On one node: what it fetched; in a cluster: each node's share.
      const fetched = (im: Image) => {
        if (!im.nodes) return im.size ? `${bytes(im.bytes_fetched)} (${pct(im.bytes_fetched ?? 0, im.size)})` : "-";
        return h(
          "div",
          { "data-testid": "image-nodes" },
          im.nodes.map((n) =>
            h("div", {}, im.size ? `${n.node}: ${bytes(n.bytes_fetched)} (${pct(n.bytes_fetched, im.size)})` : n.node),
          ),
        );
      };
      app.replaceChildren(
        h(
          "div",
          { "data-testid": "images" },
          h("h1", {}, "Images and environments"),
          table(
            ["name", "kind", "size", cluster ? "fetched per node" : "fetched on this node", "layers"],
            imgs.map((im) => [
              h("code", {}, im.name + (im.default ? " (default)" : "")),
              im.kind,
              im.size ? bytes(im.size) : "-",
              fetched(im),
              (im.layers ?? []).map((l) =>
                h(
                  "div",
                  { class: "layer" },
                  `${l.role} ${l.digest.slice(0, 19)} ${bytes(l.size)}, fetched ${pct(l.bytes_fetched, l.size)}` +
                    (l.mounted ? `, mounted, ${l.sandboxes} sandboxes` : "") +
                    (cluster ? " (all nodes)" : ""),
                ),
              ),
            ]),
          ),
        ),
      );
      document.body.dataset.ready = "images";
    })
    .catch((err) => {
      if (!stopped && !refused(err)) app.replaceChildren(errorBox(err));
    });
  return { stop: () => (stopped = true) };
}

import { defineConfig } from "vite";

// The dashboard is served by dsec at /ui/; the build goes to dist/, which
// ui/embed.go embeds into the binary (committed: a machine without Node runs it).
export default defineConfig({
  base: "/ui/",
  build: { outDir: "dist", emptyOutDir: true, chunkSizeWarningLimit: 600 },
});

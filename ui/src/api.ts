// The dashboard's only way to the server: every call carries the token as a
// bearer header (never in a URL), and errors come back as ApiError with the
// server's machine-readable code.

const KEY = "dsec.token";

export function getToken(): string | null {
  return localStorage.getItem(KEY);
}

export function setToken(tok: string): void {
  localStorage.setItem(KEY, tok);
}

export function clearToken(): void {
  localStorage.removeItem(KEY);
}

/** takeFragmentToken moves a #token=... fragment into storage and out of the URL. */
export function takeFragmentToken(): void {
  const m = /^#token=([^&]*)/.exec(location.hash);
  if (!m) return;
  setToken(decodeURIComponent(m[1]));
  history.replaceState(null, "", location.pathname + location.search + "#/");
}

export class ApiError extends Error {
  constructor(
    public status: number,
    public code: string,
    message: string,
  ) {
    super(message);
  }
}

export async function api<T>(path: string, init: RequestInit = {}): Promise<T> {
  const headers = new Headers(init.headers);
  const tok = getToken();
  if (tok) headers.set("Authorization", "Bearer " + tok);
  const resp = await fetch(path, { ...init, headers });
  const text = await resp.text();
  let body: any = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    /* not JSON */
  }
  if (!resp.ok) {
    const e = body?.error;
    throw new ApiError(resp.status, e?.code ?? "http_" + resp.status, e?.message ?? (text || resp.statusText));
  }
  return body as T;
}

/** apiBlob GETs a binary answer (a FullVM screenshot) with the token. */
export async function apiBlob(path: string): Promise<Blob> {
  const headers = new Headers();
  const tok = getToken();
  if (tok) headers.set("Authorization", "Bearer " + tok);
  const resp = await fetch(path, { headers });
  if (!resp.ok) {
    const text = await resp.text();
    let e: any = null;
    try {
      e = JSON.parse(text)?.error;
    } catch {
      /* not JSON */
    }
    throw new ApiError(resp.status, e?.code ?? "http_" + resp.status, e?.message ?? (text || resp.statusText));
  }
  return resp.blob();
}

// Wire types (pkg/api and internal/frontend/dashboard).
export interface Sandbox {
  id: string;
  backend: string;
  image: string;
  state: string;
  cpu: number;
  memory_bytes: number;
  disk_bytes: number;
  created_at: string;
  last_active_at: string;
  labels?: Record<string, string>;
  cpu_class?: string;
  reclaimed?: boolean;
  // The sandbox has a display: GET /v1/sandboxes/{id}/screen returns a PNG.
  screen?: boolean;
  // State pulling: how far the node's fetch of the image got.
  pull?: PullProgress;
  // State failed: why the sandbox could not be made.
  error?: { code: string; message: string };
}
export interface PullProgress {
  ref?: string;
  digest?: string;
  phase: string;
  fetched_bytes: number;
  total_bytes: number;
  layers?: { digest: string; phase: string; fetched_bytes: number; total_bytes: number }[];
}
export interface SandboxPage {
  sandboxes: Sandbox[];
  next_cursor?: string;
  total?: number;
}
export interface Node {
  name: string;
  version?: string;
  backends?: string[];
  cgroup?: string;
  // In a cluster (an API server's overview): RPC address, ready | draining |
  // lost, admission limit and placement load score (0 idle .. 1 full).
  addr?: string;
  state?: string;
  max_sandboxes?: number;
  load_score?: number;
  cpus: number;
  memory_bytes: number;
  load1: number;
  memory_available_bytes: number;
  sandboxes: number;
  running: number;
  cpu_allocated: number;
  memory_allocated_bytes: number;
}
export interface Overview {
  generated_at: string;
  nodes: Node[];
  sandboxes: { total: number; by_state: Record<string, number>; by_backend: Record<string, number> };
  rates?: { interval_seconds: number; start: string; creates: number[]; create_errors: number[] };
  pools: { image: string; slots: number; busy: number }[];
}
export interface ImageLayer {
  digest: string;
  role: string;
  size: number;
  bytes_fetched: number;
  mounted: boolean;
  sandboxes: number;
}
export interface Image {
  name: string;
  kind: string;
  default?: boolean;
  layers?: ImageLayer[];
  size?: number;
  bytes_fetched?: number;
  // Set by a cluster's API server: each node that has the image.
  nodes?: { node: string; bytes_fetched: number; mounted_layers: number }[];
}
export interface Trajectory {
  id: string;
  sandbox_id: string;
  sandboxes: string[];
  created_at: string;
  updated_at: string;
  last_step: number;
  step_count: number;
  rebuilds?: number;
  // Re-issued steps answered from the log, and re-issued steps refused as diverged.
  replays: number;
  divergences: number;
  steps?: {
    step: number;
    op: string;
    state: string;
    sandbox_id: string;
    status?: number;
    duration_ms?: number;
    started_at: string;
    truncated?: boolean;
  }[];
}
export interface Usage {
  id: string;
  state: string;
  memory_bytes: number;
  memory_limit_bytes: number;
  cpu_seconds: number;
  cpu_percent?: number;
  cpu_limit: number;
}

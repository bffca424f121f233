#!/usr/bin/env python3
"""Per-exec overhead of the SDK over a raw HTTP call.

Runs `true` in one sandbox through (1) a raw keep-alive http.client call of
POST /v1/sandboxes/{id}/exec, (2) dsec.Client.exec, (3) dsec.AsyncClient.exec,
interleaved in rounds so that drift on the node hits all three alike, and prints
JSON with each p50 and the SDK overhead (p50 minus raw p50) in milliseconds.
It also times the client-side work alone against a canned local HTTP server, which
isolates the SDK's cost from the node's noise.

    DSEC_ADDR=... DSEC_TOKEN=... python3 sdk/python/bench_overhead.py --n 500
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import socket
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dsec  # noqa: E402


def p50(xs: List[float]) -> float:
    return statistics.median(xs) * 1000.0


def measure(addr: str, token: str, sid: str, n: int, rounds: int) -> Dict[str, float]:
    u = urlsplit(addr)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80)
    conn.connect()
    assert conn.sock is not None
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    hdr = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
    path = f"{u.path.rstrip('/')}/v1/sandboxes/{sid}/exec"
    body = json.dumps({"cmd": ["true"]}).encode()

    def raw() -> None:
        conn.request("POST", path, body=body, headers=hdr)
        r = conn.getresponse()
        doc = json.loads(r.read())
        assert r.status == 200 and doc["exit_code"] == 0, doc

    client = dsec.Client(addr, token)
    sb = client.sandbox(sid)

    def sync() -> None:
        assert sb.exec(["true"]).exit_code == 0

    aclient = dsec.AsyncClient(addr, token)
    asb = aclient.sandbox(sid)
    loop = asyncio.new_event_loop()

    async def abatch(k: int) -> List[float]:
        out = []
        for _ in range(k):
            t = time.perf_counter()
            r = await asb.exec(["true"])
            out.append(time.perf_counter() - t)
            assert r.exit_code == 0
        return out

    def batch(f: Callable[[], None], k: int) -> List[float]:
        out = []
        for _ in range(k):
            t = time.perf_counter()
            f()
            out.append(time.perf_counter() - t)
        return out

    batch(raw, 20), batch(sync, 20), loop.run_until_complete(abatch(20))  # warm up
    res: Dict[str, List[float]] = {"raw": [], "sync": [], "async": []}
    k = max(1, n // rounds)
    for _ in range(rounds):
        res["raw"] += batch(raw, k)
        res["sync"] += batch(sync, k)
        res["async"] += loop.run_until_complete(abatch(k))
    loop.close()
    conn.close()
    return {name: p50(v) for name, v in res.items()}


class _Canned(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    out = json.dumps({"exit_code": 0, "stdout": "", "stderr": "", "duration_ms": 1.0}).encode()

    def log_message(self, *a: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.out)))
        self.end_headers()
        self.wfile.write(self.out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=600, help="execs per method")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--addr", default=None)
    ap.add_argument("--token", default=None)
    a = ap.parse_args()

    client = dsec.Client(a.addr, a.token)
    addr, token = client.addr, client.token or ""
    out: Dict[str, Any] = {"n": a.n}
    with client.create(ttl=600) as sb:
        node = measure(addr, token, sb.id, a.n, a.rounds)
    out["node_p50_ms"] = {k: round(v, 3) for k, v in node.items()}
    out["node_overhead_ms"] = {k: round(node[k] - node["raw"], 3) for k in ("sync", "async")}

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Canned)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    local = measure(f"http://127.0.0.1:{httpd.server_address[1]}", "t", "sb-x", a.n, a.rounds)
    httpd.shutdown()
    out["canned_server_p50_ms"] = {k: round(v, 3) for k, v in local.items()}
    out["canned_server_overhead_ms"] = {k: round(local[k] - local["raw"], 3) for k in ("sync", "async")}
    out["target_ms"] = 1.0
    out["ok"] = all(v <= 1.0 for v in out["node_overhead_ms"].values())
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

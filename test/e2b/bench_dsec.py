#!/usr/bin/env python3
"""Helper of bench.mjs: times execs through dsec's own Python SDK.

Reads lines "SANDBOX_ID N" on stdin; for each runs N blocking execs of
/bin/bash -l -c true (the argv E2B's commands.run('true') runs) in that sandbox
and answers one JSON line: the latencies in milliseconds.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
import dsec  # noqa: E402

client = dsec.Client(addr=os.environ["DSEC_ADDR"], token=os.environ["DSEC_TOKEN"])
for line in sys.stdin:
    sid, n = line.split()
    sb = client.get(sid)
    lat = []
    for _ in range(int(n)):
        t0 = time.perf_counter()
        r = sb.exec(["/bin/bash", "-l", "-c", "true"])
        lat.append((time.perf_counter() - t0) * 1000)
        if r.exit_code != 0:
            raise SystemExit(f"exec failed: {r}")
    print(json.dumps(lat), flush=True)

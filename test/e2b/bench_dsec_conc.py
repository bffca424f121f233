#!/usr/bin/env python3
"""Helper of bench.mjs: exec throughput through dsec's asyncio Python SDK.

Reads lines "SECS ID1,ID2,..." on stdin; for each runs one loop of blocking
execs of /bin/bash -l -c true (the argv E2B's commands.run('true') runs) per
sandbox, all at once, for SECS seconds, and answers one JSON line:
{"execs": N, "secs": wall seconds, "errors": N}.
"""
import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
from dsec.aio import AsyncClient  # noqa: E402

CMD = ["/bin/bash", "-l", "-c", "true"]


async def loops(client, ids, secs):
    end = time.perf_counter() + secs
    done = errors = 0

    async def loop(sid):
        nonlocal done, errors
        sb = await client.get(sid)
        while time.perf_counter() < end:
            r = await sb.exec(CMD)
            if r.exit_code == 0:
                done += 1
            else:
                errors += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(loop(s) for s in ids))
    return {"execs": done, "secs": time.perf_counter() - t0, "errors": errors}


async def main():
    client = AsyncClient(addr=os.environ["DSEC_ADDR"], token=os.environ["DSEC_TOKEN"])
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        secs, ids = line.split()
        print(json.dumps(await loops(client, ids.split(","), float(secs))), flush=True)
    await client.aclose()


asyncio.run(main())

#!/usr/bin/env python3
"""RL-style rollout with dsec: N agents x M turns on asyncio.

Each agent gets its own sandbox (created together with create_many, which respects
the node's backpressure). Each turn, the "policy" (a stand-in here: it picks a
candidate implementation, sometimes buggy) writes a Python solution file into the
sandbox and runs the task's tests there; the reward is computed *inside* the sandbox
(fraction of tests passed, printed as JSON by the test runner). The trainer side
only collects rewards and prints statistics.

    python3 examples/rl_rollout.py --agents 16 --turns 4
    (DSEC_ADDR / DSEC_TOKEN select the server; default http://127.0.0.1:7070 and
    /var/lib/dsec/token)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from typing import List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk", "python"))

import dsec  # noqa: E402

# The task: implement fib(n). The test runner scores a solution and prints a reward.
TESTS = r'''
import json, sys
sys.path.insert(0, "/work")
cases = [(0, 0), (1, 1), (2, 1), (10, 55), (20, 6765), (30, 832040)]
passed = 0
try:
    from solution import fib
    for n, want in cases:
        try:
            if fib(n) == want:
                passed += 1
        except Exception:
            pass
except Exception as e:
    print(json.dumps({"reward": 0.0, "error": repr(e)}))
    sys.exit(0)
print(json.dumps({"reward": passed / len(cases), "passed": passed, "total": len(cases)}))
'''

# What a policy might propose: correct, off-by-one, wrong base case, syntax error.
CANDIDATES = [
    "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
    "def fib(n):\n    a, b = 0, 1\n    for _ in range(n - 1):\n        a, b = b, a + b\n    return a\n",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2) + (1 if n == 10 else 0)\n",
    "def fib(n)\n    return n\n",
]


async def agent(sb: dsec.AsyncSandbox, agent_id: int, turns: int, rng: random.Random) -> List[float]:
    await sb.files.mkdir("/work")
    await sb.files.write("/work/test_solution.py", TESTS)
    rewards = []
    for turn in range(turns):
        # the policy gets better with turns (a stand-in for learning)
        weights = [1 + 2 * turn, 1, 1, max(0.2, 1 - turn * 0.3)]
        code = rng.choices(CANDIDATES, weights)[0]
        await sb.files.write("/work/solution.py", code)
        res = await sb.exec(["python3", "/work/test_solution.py"], timeout=20, cwd="/work")
        if res.exit_code != 0:
            reward = 0.0
        else:
            reward = float(json.loads(res.stdout.strip().splitlines()[-1])["reward"])
        rewards.append(reward)
    return rewards


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--image", default=None)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    t0 = time.monotonic()
    async with dsec.AsyncClient() as client:
        sbs = await client.create_many(a.agents, concurrency=a.concurrency, image=a.image, memory="256m",
                                       ttl=1800, labels={"example": "rl_rollout"})
        t_create = time.monotonic() - t0
        try:
            results = await asyncio.gather(
                *(agent(sb, i, a.turns, random.Random(a.seed + i)) for i, sb in enumerate(sbs)),
                return_exceptions=True,
            )
        finally:
            await asyncio.gather(*(sb.delete() for sb in sbs), return_exceptions=True)
    failed = [r for r in results if isinstance(r, BaseException)]
    ok = [r for r in results if not isinstance(r, BaseException)]
    print(f"{a.agents} agents x {a.turns} turns: sandboxes in {t_create:.2f}s, "
          f"rollout done in {time.monotonic() - t0:.2f}s, {len(failed)} agents failed")
    for e in failed[:3]:
        print("  failure:", repr(e))
    print(f"{'turn':>4} {'mean':>6} {'std':>6} {'min':>5} {'max':>5}")
    for t in range(a.turns):
        col = [r[t] for r in ok]
        if col:
            print(f"{t:>4} {statistics.mean(col):6.3f} {statistics.pstdev(col):6.3f} {min(col):5.2f} {max(col):5.2f}")
    allr = [x for r in ok for x in r]
    if allr:
        print(f"all  {statistics.mean(allr):6.3f}  (n={len(allr)})")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    asyncio.run(main())

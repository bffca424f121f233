#!/usr/bin/env python3
"""Batch online-judge evaluation with dsec.

Submissions (Python, nothing to compile) are judged against test cases: each case
runs the solution with the case's input on stdin, with a time limit, and compares
stdout to the expected answer. Verdicts: AC (accepted), WA (wrong answer), TLE (time
limit exceeded), RE (runtime error), MLE (killed at the memory limit). A small pool
of sandboxes is shared by the submissions; each is reset between submissions so no
state leaks from one to the next.

    python3 examples/judge_batch.py --workers 4
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
import threading
import time
from collections import Counter
from typing import Dict, List, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk", "python"))

import dsec  # noqa: E402

# Problem: read n, then n integers; print their sum.
CASES: List[Tuple[str, str]] = [
    ("3\n1 2 3\n", "6"),
    ("1\n-5\n", "-5"),
    ("5\n10 20 30 40 50\n", "150"),
    ("0\n\n", "0"),
]

SUBMISSIONS: Dict[str, str] = {
    "alice": "n = int(input())\nprint(sum(map(int, input().split())) if n else 0)\n",
    "bob": "import sys\ndata = sys.stdin.read().split()\nprint(sum(int(x) for x in data[1:]))\n",
    "carol": "n = int(input())\nprint(sum(map(int, input().split())) + 1)\n",  # WA
    "dave": "while True:\n    pass\n",  # TLE
    "erin": "n = int(input())\nxs = input().split()\nprint(int(xs[0]) + int(xs[1]) + int(xs[2]))\n",  # RE on some
    "frank": "x = bytearray(1 << 30)\nprint(0)\n",  # MLE at 256 MiB
}


def verdict(res: dsec.ExecResult, want: str) -> str:
    if res.timed_out:
        return "TLE"
    if res.oom_killed:
        return "MLE"
    if res.exit_code != 0:
        return "RE"
    return "AC" if res.stdout.strip() == want.strip() else "WA"


def judge(sb: dsec.Sandbox, code: str, time_limit: float) -> List[str]:
    sb.files.write("/judge/main.py", code)
    out = []
    for stdin, want in CASES:
        res = sb.exec(["python3", "/judge/main.py"], stdin=stdin, timeout=time_limit, cwd="/judge",
                      user="65534", max_output="64k")
        out.append(verdict(res, want))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=3, help="sandboxes judging in parallel")
    ap.add_argument("--time-limit", type=float, default=2.0)
    a = ap.parse_args()

    client = dsec.Client()
    t0 = time.monotonic()
    pool = client.create_many(a.workers, memory="256m", ttl=900, labels={"example": "judge_batch"})
    todo: "queue.Queue[str]" = queue.Queue()
    for name in SUBMISSIONS:
        todo.put(name)
    verdicts: Dict[str, List[str]] = {}
    errors: Dict[str, str] = {}

    def worker(sb: dsec.Sandbox) -> None:
        while True:
            try:
                name = todo.get_nowait()
            except queue.Empty:
                return
            try:
                sb.files.mkdir("/judge")
                verdicts[name] = judge(sb, SUBMISSIONS[name], a.time_limit)
            except dsec.DsecError as e:  # dsec failed, not the submission
                errors[name] = f"{e.code}{' (infrastructure, retry)' if e.infrastructure else ''}: {e.message}"
            finally:
                try:
                    sb.reset()  # a clean sandbox for the next submission
                except dsec.DsecError:
                    pass

    try:
        threads = [threading.Thread(target=worker, args=(sb,)) for sb in pool]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for sb in pool:
            sb.delete()

    print(f"{'submission':<12}" + "".join(f"{'#' + str(i + 1):>5}" for i in range(len(CASES))) + "  result")
    totals: Counter = Counter()
    for name in SUBMISSIONS:
        if name in errors:
            print(f"{name:<12} error: {errors[name]}")
            continue
        vs = verdicts[name]
        totals.update(vs)
        final = "AC" if all(v == "AC" for v in vs) else next(v for v in vs if v != "AC")
        print(f"{name:<12}" + "".join(f"{v:>5}" for v in vs) + f"  {final}")
    print(f"\n{sum(totals.values())} runs in {time.monotonic() - t0:.1f}s: " +
          ", ".join(f"{k}={v}" for k, v in sorted(totals.items())))
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()

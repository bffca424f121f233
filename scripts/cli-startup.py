"""Start-up cost of dsec client binaries: wall time and peak resident memory.

Usage: python3 scripts/cli-startup.py [--rounds 20] BIN [BIN...]
Runs `BIN --help` and `BIN ls` (against the server in DSEC_ADDR/DSEC_TOKEN, which
must be running) for every BIN, interleaved: each round runs every (BIN, command)
pair once, the starting pair rotating. Wall time is measured around fork+exec+wait
of the whole process; peak resident memory is GNU time's "%M" of a second run in the
same round (a child forked from Python would count Python's own pages in its
ru_maxrss). Prints min, p50 and max wall time in ms and the largest peak resident
memory in MiB per pair.
A benchmark, not a test: run it on a quiet machine.
"""

import argparse
import statistics
import subprocess
import sys
import time


def run(argv):
    """The wall time of argv in ms, and its peak resident memory in MiB."""
    t0 = time.perf_counter()
    p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.decode()[-500:]}")
    t = subprocess.run(["/usr/bin/time", "-f", "%M"] + argv, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, check=True)
    return wall * 1000, int(t.stderr.decode().split()[-1]) / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("bins", nargs="+")
    a = ap.parse_args()
    pairs = [(b, c) for b in a.bins for c in (["--help"], ["ls"])]
    for b, c in pairs:  # warm the page cache once
        run([b] + c)
    res = {i: ([], []) for i in range(len(pairs))}
    for r in range(a.rounds):
        for k in range(len(pairs)):
            i = (r + k) % len(pairs)
            b, c = pairs[i]
            w, m = run([b] + c)
            res[i][0].append(w)
            res[i][1].append(m)
    print(f"{a.rounds} interleaved rounds")
    print(f"{'binary':40} {'command':8} {'min ms':>8} {'p50 ms':>8} {'max ms':>8} {'max RSS MiB':>12}")
    for i, (b, c) in enumerate(pairs):
        ws, ms = res[i]
        print(f"{b:40} {' '.join(c):8} {min(ws):8.2f} {statistics.median(ws):8.2f} {max(ws):8.2f} {max(ms):12.1f}")


if __name__ == "__main__":
    main()

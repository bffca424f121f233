#!/usr/bin/python3
"""sf-overhead.py: FnCall's cost per call, per language, through SandboxFusion's /run_code.

For each language, the same program (it prints the line it reads) is run
  - through dsec: `dsec bench sandboxfusion --parallel 1` against a SandboxFusion
    listener, one call at a time (HTTP, the front end, FnCall; a compiled
    language's binary comes from the compile cache after the first call);
  - bare: the judge image's own interpreter (or the binary its compiler made,
    compiled once) started directly on the host, in the judge image's tree
    (an overlay of it, chroot) with no namespaces, cgroup or limits: fork,
    exec, stdin in, stdout read.
and the two medians are printed as a Markdown table.

Run as root in a mount namespace of its own (the overlay and /proc go away with it):

    bin/dsec server --sandboxfusion-listen 127.0.0.1:8080 &
    unshare -m --propagation private /usr/bin/python3 scripts/sf-overhead.py --url http://127.0.0.1:8080
"""

import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

JAVATUPLES = "/usr/share/java/javatuples.jar"

# language -> (file, program, compile command or None, run argv); the commands are
# FnCall's (internal/backend/fncall/judge.go), run in /w.
LANGS = {
    "python": ("main.py", "print(input())\n", None, ["/usr/bin/python3", "main.py"]),
    "bash": ("main.sh", 'read -r x; echo "$x"\n', None, ["/bin/bash", "main.sh"]),
    "perl": ("main.pl", "print scalar(<STDIN>);\n", None, ["/usr/bin/perl", "main.pl"]),
    "nodejs": ("main.js", "process.stdout.write(require('fs').readFileSync(0, 'utf8'));\n", None,
               ["/usr/bin/node", "main.js"]),
    "php": ("main.php", "<?php echo fgets(STDIN);\n", None, ["/usr/bin/php", "-f", "main.php"]),
    "ruby": ("main.rb", "puts gets\n", None, ["/usr/bin/ruby", "main.rb"]),
    "lua": ("main.lua", "print(io.read())\n", None, ["/usr/bin/lua5.4", "main.lua"]),
    "R": ("main.R", 'cat(readLines(file("stdin"), n = 1), "\\n")\n', None, ["/usr/bin/Rscript", "main.R"]),
    "racket": ("main.rkt", "#lang racket/base\n(displayln (read-line))\n", None, ["/usr/bin/racket", "main.rkt"]),
    "cpp": ("main.cpp", "#include <iostream>\n#include <string>\nint main() { std::string s; std::getline(std::cin, s);"
            " std::cout << s << std::endl; }\n", "g++ -O2 -pipe -std=gnu++17 -o .out main.cpp", ["./.out"]),
    "go": ("main.go", 'package main\n\nimport (\n\t"bufio"\n\t"fmt"\n\t"os"\n)\n\nfunc main() {\n\ts := bufio.NewScanner(os.Stdin)\n'
           '\ts.Scan()\n\tfmt.Println(s.Text())\n}\n',
           "GOCACHE=/w/.cache/go-build GOPATH=/w/go GO111MODULE=off CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -o .out main.go",
           ["./.out"]),
    "rust": ("main.rs", "use std::io;\nfn main() { let mut s = String::new(); io::stdin().read_line(&mut s).unwrap();"
             " print!(\"{}\", s); }\n", "rustc -o .out main.rs", ["./.out"]),
    "java": ("Main.java", "import java.util.Scanner;\npublic class Main { public static void main(String[] a) {"
             " System.out.println(new Scanner(System.in).nextLine()); } }\n",
             "mkdir -p classes && javac -encoding UTF-8 -cp " + JAVATUPLES + " -d classes Main.java && jar cf .out -C classes .",
             ["/usr/bin/java", "-cp", ".out:" + JAVATUPLES, "-ea", "Main"]),
    "csharp": ("Program.cs", "using System;\nclass P { static void Main() { Console.WriteLine(Console.ReadLine()); } }\n",
               "mcs -out:tmp/main.exe Program.cs && mv tmp/main.exe .out", ["/usr/bin/mono", ".out"]),
}


def sh(*argv):
    subprocess.run(argv, check=True)


def tree(images):
    """The judge image's tree as an overlay with a writable /w, /proc and /dev."""
    work = tempfile.mkdtemp(prefix="sf-overhead-", dir="/var/lib")
    for d in ("upper", "work", "root"):
        os.mkdir(os.path.join(work, d))
    root = os.path.join(work, "root")
    sh("mount", "-t", "overlay", "overlay", "-o",
       f"lowerdir={images}/judge/rootfs,upperdir={work}/upper,workdir={work}/work", root)
    sh("mount", "-t", "proc", "proc", os.path.join(root, "proc"))
    sh("mount", "--rbind", "/dev", os.path.join(root, "dev"))
    os.makedirs(os.path.join(root, "w", "tmp"), exist_ok=True)

    def cleanup():
        subprocess.run(["umount", "-R", root], check=False)
        shutil.rmtree(work, ignore_errors=True)
    atexit.register(cleanup)
    return root


def bare(lang, n):
    """The median of n bare runs; the caller is chrooted in the tree."""
    fname, code, compile_cmd, argv = LANGS[lang]
    with open(os.path.join("/w", fname), "w") as f:
        f.write(code)
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/w", "LANG": "C.UTF-8"}
    if compile_cmd:
        c = subprocess.run(["/bin/sh", "-c", compile_cmd], cwd="/w", env=env, capture_output=True)
        if c.returncode != 0:
            raise SystemExit(f"{lang}: {compile_cmd}: exit {c.returncode}: {(c.stdout + c.stderr)[-500:]!r}")
    times = []
    for i in range(n + 1):
        t0 = time.perf_counter()
        p = subprocess.run(argv, cwd="/w", env=env, input=f"{i}\n".encode(), capture_output=True)
        dt = time.perf_counter() - t0
        if p.returncode != 0 or p.stdout.strip() != str(i).encode():
            raise SystemExit(f"{lang}: bare run {i}: exit {p.returncode}, stdout {p.stdout!r}, stderr {p.stderr[-300:]!r}")
        if i > 0:  # the first run warms the page cache
            times.append(dt * 1000)
    return statistics.median(times)


def through_dsec(dsec, url, lang, n):
    fname, code, _, _ = LANGS[lang]
    out = subprocess.run([dsec, "bench", "sandboxfusion", "--url", url, "--n", str(n + 1), "--parallel", "1",
                          "--language", lang, "--code", code, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{lang}: dsec bench sandboxfusion: {out.stderr[-500:]}{out.stdout[-500:]}")
    r = json.loads(out.stdout)
    return r["p50_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True, help="a --sandboxfusion-listen address, http://HOST:PORT")
    ap.add_argument("--n", type=int, default=30, help="calls (and bare runs) per language")
    ap.add_argument("--dsec", default=os.path.join(os.path.dirname(__file__), "..", "bin", "dsec"))
    ap.add_argument("--images", default=os.environ.get("DSEC_IMAGES_DIR", "/var/lib/dsec/images"))
    ap.add_argument("langs", nargs="*", default=list(LANGS))
    a = ap.parse_args()
    dsec = os.path.abspath(a.dsec)
    root = tree(a.images)
    # The bare runs from a child chrooted once in the tree (so each run is a
    # plain spawn, no chroot of its own), before the calls through dsec.
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(rfd)
            os.chroot(root)
            os.chdir("/w")
            res = {lang: bare(lang, a.n) for lang in a.langs}
            os.write(wfd, json.dumps(res).encode())
        except BaseException as e:  # noqa: BLE001 - reported, then the child ends
            print(e, file=sys.stderr)
            os._exit(1)
        os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd) as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise SystemExit("the bare runs failed")
    bares = json.loads(data)
    print("| language | `/run_code` p50 (ms) | bare p50 (ms) | ratio | difference (ms) |")
    print("|---|---:|---:|---:|---:|")
    for lang in a.langs:
        b = bares[lang]
        d = through_dsec(dsec, a.url, lang, a.n)
        print(f"| {lang} | {d:.1f} | {b:.1f} | {d / b:.2f}× | {d - b:.1f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())

"""dsec's /run_jupyter driver: SandboxFusion's Jupyter mode in one sandbox.

The SandboxFusion front end (internal/frontend/sandboxfusion/jupyter.go) writes
this file into a fresh sandbox of the code-interpreter image and runs it with
the request on stdin: {"kernel", "cells", "output"}. It starts one kernel of
that name (jupyter_client's KernelManager), checks that it answers, runs the
cells in order, each to its end, and writes
{"status": "Finished", "cells": [{stdout, stderr, display, error}, ...]} to
the "output" path. A cell that raises does not stop the ones after it.
Everything the driver itself prints is the response's "driver" output.
"""

import json
import queue
import sys

from jupyter_client.manager import KernelManager

READY_TIMEOUT_S = 60.0
ATTEMPTS = 3


def start_kernel(name):
    """A started kernel and its client, retried: a kernel that does not answer
    a probe correctly is shut down and another one started."""
    last = None
    for attempt in range(ATTEMPTS):
        km = KernelManager(kernel_name=name)
        try:
            km.start_kernel()
            kc = km.client()
            kc.start_channels()
            kc.wait_for_ready(timeout=READY_TIMEOUT_S)
            probe = run_cell(kc, "print(6 * 7)")
            if probe["stdout"] != "42\n":
                raise RuntimeError("the kernel's probe printed %r" % probe["stdout"])
            return km, kc
        except Exception as e:  # noqa: BLE001 - any start failure is retried
            last = e
            print("kernel start %d failed: %s" % (attempt + 1, e), flush=True)
            try:
                km.shutdown_kernel(now=True)
            except Exception as err:  # noqa: BLE001
                print("kernel shutdown failed, ignored: %s" % err, flush=True)
    raise RuntimeError("no kernel %r answered after %d attempts: %s" % (name, ATTEMPTS, last))


def run_cell(kc, code):
    """Runs code and gathers what its request published until the kernel is
    idle again: streams by name, rich outputs (display_data and
    execute_result) as their data, errors as their content."""
    out = {"stdout": "", "stderr": "", "display": [], "error": []}
    msg_id = kc.execute(code, stop_on_error=False)
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=3600)
        except queue.Empty:
            continue
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind, content = msg["header"]["msg_type"], msg["content"]
        if kind == "stream":
            name = content.get("name")
            if name in ("stdout", "stderr"):
                out[name] += content.get("text", "")
        elif kind in ("display_data", "execute_result"):
            out["display"].append(content.get("data", {}))
        elif kind == "error":
            out["error"].append(content)
        elif kind == "status" and content.get("execution_state") == "idle":
            break
    # The shell reply (its status is not part of SandboxFusion's cell).
    while True:
        reply = kc.get_shell_msg(timeout=3600)
        if reply.get("parent_header", {}).get("msg_id") == msg_id:
            break
    return out


def main():
    req = json.load(sys.stdin)
    km, kc = start_kernel(req.get("kernel") or "python3")
    print("kernel %s started" % km.kernel_name, flush=True)
    cells = [run_cell(kc, cell) for cell in req["cells"]]
    kc.stop_channels()
    try:
        km.shutdown_kernel(now=True)
    except Exception as err:  # noqa: BLE001
        print("kernel shutdown failed, ignored: %s" % err, flush=True)
    with open(req["output"], "w", encoding="utf-8") as f:
        json.dump({"status": "Finished", "cells": cells}, f)


if __name__ == "__main__":
    main()

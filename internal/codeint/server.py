"""dsec's code interpreter service: E2B's interpreter protocol over Jupyter kernels.

The E2B front end writes this file into every sandbox of the code-interpreter-v1
template and starts it (internal/codeint; the E2B front end at create, /v1 code:run on first use); it listens on port
49999, which E2B's proxy (and dsec's) reaches as the sandbox's interpreter port.

  GET  /health                    "OK"
  POST /execute                   {code, context_id?, language?, env_vars?}:
                                  one JSON object a line as the cell runs
                                  (stdout, stderr, result, error,
                                  number_of_executions, keepalive), ending with
                                  {"type": "end_of_execution"}
  GET  /contexts                  [{id, language, cwd}]
  POST /contexts                  {language?, cwd?} -> {id, language, cwd}
  POST /contexts/ID/restart       a fresh kernel, same id
  DELETE /contexts/ID

Each context is one kernel process: Python (and bash, through its %%bash)
on Debian's ipykernel (the Jupyter wire protocol, spoken here with
jupyter_client's Session over pyzmq), JavaScript and TypeScript on a small
Node driver (jskernel.js beside this file), R on an Rscript driver (rkernel.R),
Java on a JShell driver (JavaKernel.java, compiled on first use into
JAVA_CLASSES, or found there compiled by the image). A client that goes away while its
cell runs interrupts the kernel (SIGINT; Java's JShell stops the cell; a
JavaScript kernel is replaced), so
the next cell of that context does not wait behind it. A kernel that died is
replaced at the context's next cell. Started with --supervise, the service
runs as a child that is started again whenever it ends; a new instance kills
the kernels of the one before it. Only the Python standard library, pyzmq and
jupyter_client are used.
"""

import datetime
import json
import os
import queue
import select
import shutil
import signal
import socket
import subprocess
import errno
import hashlib
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import zmq
from jupyter_client.connect import write_connection_file
from jupyter_client.session import Session

PORT = int(os.environ.get("DSEC_CODEINT_PORT", "49999"))
HOME = os.environ.get("DSEC_CODEINT_CWD") or os.path.expanduser("~")  # contexts' default cwd
KEEPALIVE_S = 5.0
INTERRUPT_GRACE_S = 5.0  # how long a stopped Java cell may take to end before its kernel is replaced
START_TIMEOUT_S = 60.0
ZCTX = zmq.Context.instance()


SERVED = ("python", "javascript", "typescript", "bash", "r", "java")


def normalize_language(lang):
    lang = (lang or "python").strip().lower()
    lang = {"js": "javascript", "ts": "typescript", "py": "python", "python3": "python",
            "sh": "bash", "shell": "bash", "rlang": "r"}.get(lang, lang)
    if lang not in SERVED:
        raise ContextError(400, f"language {lang!r} is not served by this sandbox "
                                f"(it serves {', '.join(SERVED)})")
    return lang


class ContextError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


# Result keys as E2B's interpreter names the kernel's MIME types; other types
# stay under their MIME name (the SDK's Result.extra).
MIME_KEYS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "e2b/data": "data",
    "e2b/chart": "chart",
}


def result_line(data, main):
    out = {"type": "result", "is_main_result": main}
    extra = {}
    for mime, value in data.items():
        key = MIME_KEYS.get(mime)
        if key is None:
            extra[mime] = value
            continue
        if key == "text" and len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]  # a str result reads as its text, as E2B gives it
        out[key] = value
    if extra:
        out["extra"] = extra
    return out


# KERNEL_SETUP runs silently in every new Python kernel: PIL images shown or
# saved are displayed as the cell's results, and a pandas DataFrame carries
# its data (the SDK's Result.data) besides its text and HTML.
KERNEL_SETUP = r"""
def __dsec_setup():
    import json
    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter
    from IPython.display import display
    from traitlets import ObjectName, Unicode
    ip = get_ipython()

    class DataFormatter(BaseFormatter):
        format_type = Unicode("e2b/data")
        print_method = ObjectName("_repr_e2b_data_")
        _return_type = (dict,)

    f = DataFormatter(parent=ip.display_formatter)
    ip.display_formatter.formatters["e2b/data"] = f
    f.for_type_by_name("pandas.core.frame", "DataFrame",
                       lambda df: json.loads(df.to_json(orient="split", date_format="iso")))
    try:
        from PIL import Image
    except ImportError:
        return
    def show(self, *args, **kwargs):
        display(self)
    import os
    orig_save = Image.Image.save
    def save(self, fp, *args, **kwargs):
        orig_save(self, fp, *args, **kwargs)
        if isinstance(fp, (str, bytes, os.PathLike)):  # a file, not the PNG repr's buffer
            display(self)
    Image.Image.show = show
    Image.Image.save = save
__dsec_setup()
del __dsec_setup
"""

# CHART_SETUP runs silently in every new Python kernel: a matplotlib figure
# also carries its chart (the SDK's Result.chart, MIME type e2b/chart): its
# type (line, scatter, bar, pie, box_and_whisker, superchart, unknown), title,
# labels and units, scales and ticks, and its elements read from the artists.
CHART_SETUP = r"""
def __dsec_charts():
    import math
    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName, Unicode
    ip = get_ipython()

    class ChartFormatter(BaseFormatter):
        format_type = Unicode("e2b/chart")
        print_method = ObjectName("_repr_e2b_chart_")
        _return_type = (dict,)

        def pop(self, typ, default=None):
            # IPython's select_figure_formats pops Figure from every formatter
            # when the inline backend starts; this one keeps it.
            return default

    def num(v):
        try:
            v = float(v)
        except (TypeError, ValueError):
            return None
        return v if math.isfinite(v) else None

    def unit(label):
        if label and label.endswith(")") and "(" in label:
            return label[label.rindex("(") + 1:-1].strip() or None
        return None

    def scale(ax, axis):
        import matplotlib.category as mcat
        import matplotlib.dates as mdates
        a = ax.xaxis if axis == "x" else ax.yaxis
        if isinstance(a.get_converter() if hasattr(a, "get_converter") else a.converter,
                      (mdates.DateConverter, mdates._SwitchableDateConverter, mdates.ConciseDateConverter)):
            return "datetime"
        if isinstance(a.units, mcat.UnitData):
            return "categorical"
        return ax.get_xscale() if axis == "x" else ax.get_yscale()

    def value(v, sc):
        if sc == "datetime":
            import matplotlib.dates as mdates
            return mdates.num2date(v).isoformat()
        return num(v)

    def text_or_none(s):
        return s or None

    def axes_base(ax, kind):
        xl, yl = ax.get_xlabel(), ax.get_ylabel()
        return {"type": kind, "title": text_or_none(ax.get_title()), "x_label": text_or_none(xl),
                "y_label": text_or_none(yl), "x_unit": unit(xl), "y_unit": unit(yl), "elements": []}

    def with_ticks(ax, c):
        xs, ys = scale(ax, "x"), scale(ax, "y")
        c.update({"x_scale": xs, "y_scale": ys,
                  "x_ticks": [value(t, xs) for t in ax.get_xticks()],
                  "y_ticks": [value(t, ys) for t in ax.get_yticks()],
                  "x_tick_labels": [t.get_text() for t in ax.get_xticklabels()],
                  "y_tick_labels": [t.get_text() for t in ax.get_yticklabels()]})
        return c

    def box_chart(ax, boxes):
        from matplotlib.lines import Line2D
        c = axes_base(ax, "box_and_whisker")
        labels = {round(float(t), 6): l.get_text() for t, l in zip(ax.get_xticks(), ax.get_xticklabels())}
        lines = [l for l in ax.lines if isinstance(l, Line2D)]
        for b in sorted(boxes, key=lambda p: p.get_path().get_extents().x0):
            ext = b.get_path().get_extents()
            x0, x1, q1, q3 = ext.x0, ext.x1, ext.y0, ext.y1
            mid = (x0 + x1) / 2
            e = {"label": labels.get(round(mid, 6), ""), "min": num(q1), "first_quartile": num(q1),
                 "median": None, "third_quartile": num(q3), "max": num(q3), "outliers": []}
            for l in lines:
                xd, yd = [float(v) for v in l.get_xdata()], [float(v) for v in l.get_ydata()]
                if not xd or min(xd) < x0 - 1e-9 or max(xd) > x1 + 1e-9:
                    continue
                if l.get_linestyle() in ("None", "", " ") and l.get_marker() not in (None, "None", ""):
                    e["outliers"] = [num(v) for v in yd]
                elif len(set(xd)) == 1 and len(yd) == 2:  # a whisker
                    e["min"] = num(min(e["min"], *yd))
                    e["max"] = num(max(e["max"], *yd))
                elif len(set(yd)) == 1 and abs(min(xd) - x0) < 1e-9 and abs(max(xd) - x1) < 1e-9:
                    e["median"] = num(yd[0])
            c["elements"].append(e)
        return c

    def axes_chart(ax):
        from matplotlib.collections import PathCollection
        from matplotlib.container import BarContainer
        from matplotlib.patches import PathPatch, Wedge
        wedges = [p for p in ax.patches if isinstance(p, Wedge)]
        if wedges:
            c = axes_base(ax, "pie")
            labels = [t.get_text() for t in ax.texts]
            for i, w in enumerate(wedges):
                c["elements"].append({"label": (w.get_label() if not w.get_label().startswith("_") else None) or (labels[2 * i] if len(labels) >= 2 * len(wedges) else
                                      (labels[i] if i < len(labels) else "")),
                                      "angle": round(abs(w.theta2 - w.theta1), 4), "radius": num(w.r)})
            return c
        bars = [b for b in ax.containers if isinstance(b, BarContainer)]
        if bars:
            c = with_ticks(ax, axes_base(ax, "bar"))
            ticks = {round(float(t), 6): l.get_text() for t, l in zip(ax.get_xticks(), ax.get_xticklabels())}
            for cont in bars:
                for r in cont.patches:
                    x = round(r.get_x() + r.get_width() / 2, 6)
                    c["elements"].append({"label": ticks.get(x, ""), "group": cont.get_label(),
                                          "value": num(r.get_height())})
            return c
        boxes = [p for p in ax.patches if isinstance(p, PathPatch)]
        if boxes:
            return box_chart(ax, boxes)
        scatters = [s for s in ax.collections if isinstance(s, PathCollection)]
        if scatters:
            c = with_ticks(ax, axes_base(ax, "scatter"))
            xs, ys = c["x_scale"], c["y_scale"]
            for s in scatters:
                c["elements"].append({"label": s.get_label(),
                                      "points": [[value(x, xs), value(y, ys)] for x, y in s.get_offsets()]})
            return c
        if ax.lines:
            c = with_ticks(ax, axes_base(ax, "line"))
            xs, ys = c["x_scale"], c["y_scale"]
            for l in ax.lines:
                c["elements"].append({"label": l.get_label(),
                                      "points": [[value(x, xs), value(y, ys)] for x, y in l.get_xydata()]})
            return c
        return axes_base(ax, "unknown")

    def figure_chart(fig):
        try:
            fig.canvas.draw()  # tick labels are set when drawn
            axes = [a for a in fig.axes if a.get_visible()]
            if not axes:
                return None
            if len(axes) == 1:
                return axes_chart(axes[0])
            sup = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else None
            return {"type": "superchart", "title": sup or None, "elements": [axes_chart(a) for a in axes]}
        except Exception:  # a figure the extraction does not understand has no chart
            return None

    f = ChartFormatter(parent=ip.display_formatter)
    ip.display_formatter.formatters["e2b/chart"] = f
    f.for_type_by_name("matplotlib.figure", "Figure", figure_chart)
__dsec_charts()
del __dsec_charts
"""

KERNELS_DIR = os.environ.get("DSEC_CODEINT_KERNELS", "/tmp/.dsec-codeint-kernels")
HERE = os.path.dirname(os.path.abspath(__file__))


def track_kernel(pid, alive):
    """Records (alive) or forgets a kernel's pid, so that a restarted service
    ends the kernels of the one before it (reap_kernels)."""
    path = os.path.join(KERNELS_DIR, str(pid))
    if alive:
        os.makedirs(KERNELS_DIR, exist_ok=True)
        with open(path, "w"):
            pass
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def reap_kernels():
    """Kills the kernels a previous instance of the service left behind."""
    try:
        names = os.listdir(KERNELS_DIR)
    except FileNotFoundError:
        return
    for name in names:
        try:
            with open(f"/proc/{int(name)}/cmdline", "rb") as f:
                cmd = f.read()
            if any(k in cmd for k in (b"ipykernel_launcher", b"jskernel.js", b"rkernel.R", b"JavaKernel")):
                os.killpg(int(name), signal.SIGKILL)
        except (ValueError, OSError):
            pass
        track_kernel(name, False)


class Kernel:
    """One Jupyter kernel process (Python; bash cells run through it) and the
    sockets to it."""

    def __init__(self, language, cwd, env):
        self.language = language
        if not os.path.isdir(cwd):
            raise ContextError(400, f"cwd {cwd!r} is not a directory")
        fd, self.conn_file = tempfile.mkstemp(prefix="kernel-", suffix=".json")
        os.close(fd)
        _, cfg = write_connection_file(self.conn_file, ip="127.0.0.1", key=uuid.uuid4().hex.encode())
        self.session = Session(key=cfg["key"].encode() if isinstance(cfg["key"], str) else cfg["key"],
                               signature_scheme=cfg.get("signature_scheme", "hmac-sha256"), username="e2b")
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", self.conn_file]
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
        track_kernel(self.proc.pid, True)
        url = "tcp://127.0.0.1:%d"
        self.shell = ZCTX.socket(zmq.DEALER)
        self.shell.linger = 0
        self.shell.connect(url % cfg["shell_port"])
        self.iopub = ZCTX.socket(zmq.SUB)
        self.iopub.linger = 0
        self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
        self.iopub.connect(url % cfg["iopub_port"])
        self.wait_ready()

    def wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        replied = False
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ContextError(500, f"the {self.language} kernel exited with status {self.proc.returncode}")
            if not replied:
                self.session.send(self.shell, "kernel_info_request", {})
                if self.shell.poll(1000):
                    self.session.recv(self.shell)
                    replied = True
            # The SUB socket is ready once it sees the kernel's messages.
            if replied and self.iopub.poll(500):
                while self.iopub.poll(0):
                    self.session.recv(self.iopub)
                return
            if replied:
                replied = False  # ask again: that reply's status went by before the subscription
        self.close()
        raise ContextError(500, f"the {self.language} kernel did not start within {START_TIMEOUT_S:.0f}s")

    def alive(self):
        return self.proc.poll() is None

    def interrupt(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)

    def close(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        track_kernel(self.proc.pid, False)
        self.shell.close()
        self.iopub.close()
        try:
            os.unlink(self.conn_file)
        except FileNotFoundError:
            pass

    def execute(self, code, silent=False):
        msg = self.session.send(self.shell, "execute_request", {
            "code": code, "silent": silent, "store_history": not silent,
            "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
        return msg["header"]["msg_id"]

    def next_message(self, timeout_s):
        """The next iopub message, or None after timeout_s."""
        if self.iopub.poll(int(timeout_s * 1000)):
            return self.session.recv(self.iopub)[1]
        return None

    def drain_shell(self):
        while self.shell.poll(0):
            self.session.recv(self.shell)


JAVA_SOURCE = os.path.join(HERE, "JavaKernel.java")
# JAVA_CLASSES holds the compiled Java kernel, one directory per version of
# its source (java-SHA, the first 16 hex digits of its SHA-256), where
# scripts/codeint-image.sh puts it at the image's build.
JAVA_CLASSES = os.environ.get("DSEC_CODEINT_JAVA_CLASSES", "/opt/dsec/codeint")
JAVA_COMPILE_TIMEOUT_S = 120.0
java_compile_lock = threading.Lock()


def java_classes():
    """The directory of the compiled Java kernel, compiled now unless it is
    there already."""
    with open(JAVA_SOURCE, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()[:16]
    out = os.path.join(JAVA_CLASSES, "java-" + sha)
    with java_compile_lock:
        if os.path.exists(os.path.join(out, "JavaKernel.class")):
            return out
        javac = shutil.which("javac")
        if javac is None:
            raise ContextError(400, "language 'java' needs a JDK (javac), which this sandbox does not have")
        os.makedirs(JAVA_CLASSES, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".java-", dir=JAVA_CLASSES)
        try:
            r = subprocess.run([javac, "-d", tmp, JAVA_SOURCE], capture_output=True, timeout=JAVA_COMPILE_TIMEOUT_S)
            if r.returncode != 0:
                raise ContextError(500, "the Java kernel does not compile: " + r.stderr.decode(errors="replace")[-1024:])
            os.chmod(tmp, 0o755)
            try:
                os.rename(tmp, out)
            except OSError:
                if not os.path.exists(os.path.join(out, "JavaKernel.class")):
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return out


class NodeKernel:
    """One driver process per context, one JSON object a line each way:
    jskernel.js on Node (JavaScript and TypeScript); rkernel.R on Rscript (R)
    and JavaKernel on Java, whose lines are "ID TYPE TEXTHEX", read into the
    same objects (a Java error's text is NAME NUL VALUE NUL TRACEBACK)."""

    def __init__(self, language, cwd, env):
        self.language = language
        if not os.path.isdir(cwd):
            raise ContextError(400, f"cwd {cwd!r} is not a directory")
        if language == "r":
            exe, script, need = shutil.which("Rscript"), "rkernel.R", "R"
        elif language == "java":
            exe, script, need = shutil.which("java"), "", "Java"
        else:
            exe, script, need = shutil.which("node") or shutil.which("nodejs"), "jskernel.js", "Node.js"
        if exe is None:
            raise ContextError(400, f"language {language!r} needs {need}, which this sandbox does not have")
        if language == "r":
            argv = [exe, "--vanilla", os.path.join(HERE, script)]
        elif language == "java":
            argv = [exe, "-XX:+UseSerialGC", "-cp", java_classes(), "JavaKernel"]
        else:
            argv = [exe, os.path.join(HERE, script)]
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     start_new_session=True)
        track_kernel(self.proc.pid, True)
        self.lines = queue.Queue()
        self.count = 0
        threading.Thread(target=self._read, daemon=True).start()
        m = self.next_message(START_TIMEOUT_S)
        if m is None or m.get("type") != "ready":
            self.close()
            raise ContextError(500, f"the {language} kernel did not start")

    def _parse(self, line):
        if self.language not in ("r", "java"):
            return json.loads(line)
        cell, typ, text = line.decode().rstrip("\n").split(" ", 2)
        text = bytes.fromhex(text).decode("utf-8", "replace")
        m = {"id": cell, "type": typ, "text": text, "name": "Error", "value": text, "traceback": ""}
        if self.language == "java" and typ == "error":
            m["name"], m["value"], m["traceback"] = (text.split("\0", 2) + ["", ""])[:3]
        return m

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.lines.put(self._parse(line))
            except ValueError:
                pass
        self.lines.put(None)

    def alive(self):
        return self.proc.poll() is None

    def next_message(self, timeout_s):
        try:
            return self.lines.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def execute(self, code, env):
        self.count += 1
        cell = uuid.uuid4().hex
        if self.language in ("r", "java"):
            envhex = ",".join(k.encode().hex() + "=" + v.encode().hex() for k, v in env.items())
            line = f"{cell} {code.encode().hex()} {envhex}\n"
        else:
            line = json.dumps({"id": cell, "code": code, "env": env, "count": self.count,
                               "typescript": self.language == "typescript"}) + "\n"
        self.proc.stdin.write(line.encode())
        self.proc.stdin.flush()
        return cell

    def interrupt(self, cell):
        """Stops cell (Java's JShell can; the others cannot): True when asked."""
        if self.language != "java":
            return False
        try:
            self.proc.stdin.write(f"! {cell}\n".encode())
            self.proc.stdin.flush()
        except OSError:
            return False
        return True

    def close(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        track_kernel(self.proc.pid, False)


def new_kernel(language, cwd, env):
    if language in ("javascript", "typescript", "r", "java"):
        return NodeKernel(language, cwd, env)
    k = Kernel(language, cwd, env)
    Context.run_silent_on(k, KERNEL_SETUP)
    Context.run_silent_on(k, CHART_SETUP)
    return k


def code_to_set_env(env):
    if not env:
        return ""
    return "import os as __dsec_os; __dsec_os.environ.update(%s); del __dsec_os" % json.dumps(env)


def code_to_restore_env(env, before):
    if not env:
        return ""
    keep = {k: before[k] for k in env if k in before}
    drop = [k for k in env if k not in before]
    return ("import os as __dsec_os; __dsec_os.environ.update(%s)\n"
            "for __dsec_k in %s: __dsec_os.environ.pop(__dsec_k, None)\n"
            "del __dsec_os") % (json.dumps(keep), json.dumps(drop))


def bash_cell(code):
    """A bash cell, run by the Python kernel's %%bash (output streamed)."""
    return "get_ipython().run_cell_magic('bash', '', %r)" % code


class Context:
    def __init__(self, language, cwd):
        self.id = str(uuid.uuid4())
        self.language = language
        self.cwd = cwd
        self.lock = threading.Lock()  # one cell at a time, as a notebook runs them
        self.kernel = new_kernel(language, cwd, os.environ.copy())

    def describe(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def restart(self):
        with self.lock:
            self._restart()

    def _restart(self):
        self.kernel.close()
        self.kernel = new_kernel(self.language, self.cwd, os.environ.copy())

    def close(self):
        with self.lock:
            self.kernel.close()

    @staticmethod
    def run_silent_on(k, code):
        """Runs code in Jupyter kernel k for its effect only."""
        if not code:
            return
        msg_id = k.execute(code, silent=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = k.next_message(1.0)
            if m and m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "status" \
                    and m["content"]["execution_state"] == "idle":
                break
        k.drain_shell()

    def run(self, code, env, emit, client_gone):
        """Runs one cell, calling emit(obj) for each output line. client_gone()
        says the caller left: the kernel is interrupted and the cell drained."""
        with self.lock:
            if not self.kernel.alive():
                # A kernel that died (killed, out of memory, os._exit) is
                # replaced: the cell runs in a fresh one, as after a restart.
                self._restart()
            if isinstance(self.kernel, NodeKernel):
                return self.run_node(code, env, emit, client_gone)
            return self.run_jupyter(code, env, emit, client_gone)

    def run_node(self, code, env, emit, client_gone):
        k = self.kernel
        cell = k.execute(code, env)
        count = k.count
        emit({"type": "number_of_executions", "execution_count": count})
        last_write = time.monotonic()
        interrupted = None  # when the kernel was asked to stop the cell
        while True:
            m = k.next_message(0.25)
            if m is None:
                if not k.alive():
                    emit({"type": "error", "name": "KernelDied",
                          "value": f"the kernel exited with status {k.proc.returncode}", "traceback": ""})
                    return
                if interrupted is not None and time.monotonic() - interrupted > INTERRUPT_GRACE_S:
                    self._restart()  # the cell did not stop (blocked in native code)
                    return
                if interrupted is None and client_gone():
                    if k.interrupt(cell):
                        interrupted = time.monotonic()
                        continue
                    # Node cannot interrupt a running script: a fresh kernel.
                    self._restart()
                    return
                if time.monotonic() - last_write >= KEEPALIVE_S:
                    emit({"type": "keepalive"})
                    last_write = time.monotonic()
                continue
            if m.get("id") != cell:
                continue
            t = m.get("type")
            if t == "done":
                return
            if interrupted is not None:
                continue
            if t in ("stdout", "stderr"):
                emit({"type": t, "text": m.get("text", ""), "timestamp": now()})
            elif t == "result":
                emit({"type": "result", "is_main_result": True, "text": m.get("text", "")})
            elif t == "error":
                emit({"type": "error", "name": m.get("name", ""), "value": m.get("value", ""),
                      "traceback": m.get("traceback", "")})
            last_write = time.monotonic()

    def run_jupyter(self, code, env, emit, client_gone):
        k = self.kernel
        if self.language == "bash":
            code = bash_cell(code)
        Context.run_silent_on(k, code_to_set_env(env))
        msg_id = k.execute(code)
        started = errored = interrupted = False
        last_write = time.monotonic()
        while True:
            m = k.next_message(0.25)
            if m is None:
                if k.proc.poll() is not None:
                    emit({"type": "error", "name": "KernelDied",
                          "value": f"the kernel exited with status {k.proc.returncode}", "traceback": ""})
                    return
                if not interrupted and client_gone():
                    k.interrupt()
                    interrupted = True
                if not interrupted and time.monotonic() - last_write >= KEEPALIVE_S:
                    emit({"type": "keepalive"})
                    last_write = time.monotonic()
                continue
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            t, c = m["msg_type"], m["content"]
            out = None
            if t == "execute_input":
                started = True
                out = {"type": "number_of_executions", "execution_count": c.get("execution_count")}
            elif t == "stream":
                out = {"type": "stdout" if c.get("name") == "stdout" else "stderr",
                       "text": c.get("text", ""), "timestamp": now()}
            elif t == "display_data":
                out = result_line(c.get("data", {}), False)
            elif t == "execute_result":
                out = result_line(c.get("data", {}), True)
            elif t == "error" and not errored:
                errored = True
                out = {"type": "error", "name": c.get("ename", ""), "value": c.get("evalue", ""),
                       "traceback": "\n".join(c.get("traceback", []))}
            elif t == "status" and c.get("execution_state") == "busy":
                started = True
            elif t == "status" and c.get("execution_state") == "idle" and started:
                break
            if out is not None and not interrupted:
                emit(out)
                last_write = time.monotonic()
        k.drain_shell()
        Context.run_silent_on(k, code_to_restore_env(env, dict(os.environ)))


class Contexts:
    def __init__(self):
        self.mu = threading.Lock()
        self.by_id = {}
        self.default = {}  # language -> context id
        self.default_lock = threading.Lock()

    def create(self, language, cwd):
        ctx = Context(language, cwd)
        with self.mu:
            self.by_id[ctx.id] = ctx
        return ctx

    def get(self, cid):
        with self.mu:
            return self.by_id.get(cid)

    def remove(self, cid):
        with self.mu:
            ctx = self.by_id.pop(cid, None)
            for lang, d in list(self.default.items()):
                if d == cid:
                    del self.default[lang]
        return ctx

    def list(self):
        with self.mu:
            return list(self.by_id.values())

    def for_language(self, language):
        with self.default_lock:
            with self.mu:
                cid = self.default.get(language)
                if cid in self.by_id:
                    return self.by_id[cid]
            ctx = self.create(language, HOME)
            with self.mu:
                self.default[language] = ctx.id
            return ctx


CONTEXTS = Contexts()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "dsec-codeint"

    def log_message(self, fmt, *args):
        pass

    def send_text(self, status, text):
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_json(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw.strip():
            return {}
        body = json.loads(raw)
        if not isinstance(body, dict):
            raise ContextError(400, "the body must be a JSON object")
        return body

    def route(self):
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        parts = [p for p in path.split("/") if p]
        m = self.command
        if m == "GET" and parts == ["health"]:
            return self.send_text(200, "OK")
        if m == "POST" and parts == ["execute"]:
            return self.execute()
        if parts[:1] == ["contexts"]:
            if m == "GET" and len(parts) == 1:
                return self.send_json(200, [c.describe() for c in CONTEXTS.list()])
            if m == "POST" and len(parts) == 1:
                body = self.read_json()
                ctx = CONTEXTS.create(normalize_language(body.get("language")), body.get("cwd") or HOME)
                return self.send_json(200, ctx.describe())
            if len(parts) >= 2:
                ctx = CONTEXTS.get(parts[1])
                if ctx is None:
                    return self.send_text(404, f"Context {parts[1]} not found")
                if m == "POST" and parts[2:] == ["restart"]:
                    ctx.restart()
                    return self.send_json(200, None)
                if m == "DELETE" and len(parts) == 2:
                    CONTEXTS.remove(ctx.id)
                    ctx.close()
                    return self.send_json(200, None)
        self.send_text(404, f"no route {m} {path}")

    def execute(self):
        body = self.read_json()
        code = body.get("code")
        if not isinstance(code, str):
            return self.send_text(400, "code (a string) is required")
        cid, lang = body.get("context_id"), body.get("language")
        if cid and lang:
            return self.send_text(400, "Only one of context_id or language can be provided")
        if cid:
            ctx = CONTEXTS.get(cid)
            if ctx is None:
                return self.send_text(404, f"Context {cid} not found")
        else:
            ctx = CONTEXTS.for_language(normalize_language(lang))
        env = body.get("env_vars") or {}
        if not isinstance(env, dict):
            return self.send_text(400, "env_vars must be an object")
        env = {str(k): str(v) for k, v in env.items()}
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        gone = [False]

        def emit(obj):
            if gone[0]:
                return
            data = (json.dumps(obj) + "\n").encode()
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            except OSError:
                gone[0] = True

        def client_gone():
            if gone[0]:
                return True
            try:
                r, _, _ = select.select([self.connection], [], [], 0)
                if r and self.connection.recv(1, socket.MSG_PEEK) == b"":
                    gone[0] = True
            except OSError:
                gone[0] = True
            return gone[0]

        ctx.run(code, env, emit, client_gone)
        emit({"type": "end_of_execution"})
        if gone[0]:
            self.close_connection = True
            return
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def handle_any(self):
        try:
            self.route()
        except ContextError as e:
            self.send_text(e.status, str(e))
        except (ValueError, json.JSONDecodeError) as e:
            self.send_text(400, f"bad request: {e}")
        except OSError as e:
            self.send_text(500, f"{type(e).__name__}: {e}")

    do_GET = do_POST = do_DELETE = handle_any




class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def stop(signum, _frame):
    """Ends the kernels with the service (they run in sessions of their own)."""
    for ctx in CONTEXTS.list():
        ctx.kernel.close()
    sys.exit(128 + signum)


# EXIT_IN_USE is the service's status when its port is taken: another
# instance serves it, and the supervisor ends instead of starting it again.
EXIT_IN_USE = 3


def serve():
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        srv = Server(("0.0.0.0", PORT), Handler)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            print(f"dsec-codeint: port {PORT} is in use (another instance serves it)", file=sys.stderr, flush=True)
            sys.exit(EXIT_IN_USE)
        raise
    reap_kernels()
    for lang in ("python", "javascript"):
        try:
            CONTEXTS.for_language(lang)
        except ContextError as e:
            print(f"dsec-codeint: no default {lang} context: {e}", file=sys.stderr, flush=True)
    print(f"dsec-codeint: listening on :{PORT}", flush=True)
    srv.serve_forever()


def supervise():
    """Runs the service as a child and starts it again whenever it ends (a
    crash, a kill -9): the interpreter comes back on its port with fresh
    kernels, as systemd brings E2B's back. SIGTERM ends both."""
    child = [None]
    stopping = []

    def forward(signum, _frame):
        # Never wait here: the main loop may be inside the child's wait().
        stopping.append(signum)
        if child[0] is not None:
            try:
                os.kill(child[0].pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    backoff = 0.1
    while not stopping:
        started = time.monotonic()
        child[0] = subprocess.Popen([a for a in sys.orig_argv if a != "--supervise"])
        status = child[0].wait()
        if stopping:
            break
        if status == EXIT_IN_USE:
            sys.exit(0)
        print(f"dsec-codeint: the service exited with status {status}; restarting", file=sys.stderr, flush=True)
        backoff = 0.1 if time.monotonic() - started > 10 else min(backoff * 2, 5.0)
        time.sleep(backoff)
    sys.exit(128 + stopping[0])


if __name__ == "__main__":
    if "--supervise" in sys.argv:
        supervise()
    else:
        serve()

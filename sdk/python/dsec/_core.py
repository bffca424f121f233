"""Pieces shared by the sync and async clients: configuration, request descriptions,
argument conversion, retry policy. No I/O here."""

from __future__ import annotations

import base64
import inspect
import json
import os
import random
import re
import uuid
from datetime import timedelta
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import quote, urlencode, urlsplit

from .errors import DsecError, InfrastructureError, InvalidArgumentError, error_from_response

DEFAULT_ADDR = "http://127.0.0.1:7070"
DEFAULT_DATA_DIR = "/var/lib/dsec"
DEFAULT_TIMEOUT = 120.0
"""Default socket timeout in seconds for one request (exec waits longer, see below)."""
DEFAULT_RETRIES = 3
USER_AGENT = "dsec-python/0.1"

Size = Union[int, str]
Seconds = Union[int, float, timedelta]
Cmd = Union[str, Sequence[str]]

_UNSET: Any = object()


def resolve_addr(addr: Optional[str]) -> Tuple[str, str, int, str]:
    """Return (addr, host, port, base path) for addr or $DSEC_ADDR or the default."""
    a = (addr or os.environ.get("DSEC_ADDR") or DEFAULT_ADDR).strip()
    if "://" not in a:
        a = "http://" + a
    u = urlsplit(a)
    if u.scheme != "http":
        raise InvalidArgumentError(f"dsec address {a!r}: only http:// is supported")
    host = u.hostname or "127.0.0.1"
    port = u.port or 80
    return a.rstrip("/"), host, port, u.path.rstrip("/")


def resolve_token(token: Optional[str]) -> Optional[str]:
    """token, else $DSEC_TOKEN, else the file $DSEC_DATA_DIR/token (default
    /var/lib/dsec/token); None when none is found (requests then fail with AuthError,
    except health)."""
    if token:
        return token.strip()
    t = os.environ.get("DSEC_TOKEN", "").strip()
    if t:
        return t
    d = os.environ.get("DSEC_DATA_DIR") or DEFAULT_DATA_DIR
    try:
        with open(os.path.join(d, "token"), encoding="utf-8") as f:
            t = f.read().strip()
    except OSError:
        return None
    return t or None


_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgtp]?)(i?b?)\s*$", re.I)
_MULT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def parse_size(v: Optional[Size], what: str = "size") -> Optional[int]:
    """Bytes from an int or a string like "512m", "1g", "1.5GiB", "100k", "4096"
    (units are binary: k = 1024)."""
    if v is None:
        return None
    if isinstance(v, bool):
        raise InvalidArgumentError(f"{what}: expected bytes, got {v!r}")
    if isinstance(v, int):
        if v < 0:
            raise InvalidArgumentError(f"{what} must not be negative")
        return v
    if isinstance(v, float):
        return int(v)
    m = _SIZE_RE.match(str(v))
    if not m:
        raise InvalidArgumentError(f"{what}: cannot parse {v!r} (use bytes or e.g. '512m', '1g')")
    return int(float(m.group(1)) * _MULT[m.group(2).lower()])


def seconds(v: Optional[Seconds]) -> Optional[float]:
    if v is None:
        return None
    if isinstance(v, timedelta):
        return v.total_seconds()
    return float(v)


def esc(s: str) -> str:
    return quote(str(s), safe="")


def sandbox_path(sid: str, rest: str = "") -> str:
    return "/v1/sandboxes/" + esc(sid) + rest


BATCH_PATH = "/v1/sandboxes:batch"
MAX_BATCH = 100_000  # the server's limit on one batch


def batch_unsupported(e: Any) -> bool:
    """The server has no batch route (an older one): 404 "no route", 405 or 501."""
    status = getattr(e, "status", 0)
    return status in (405, 501) or (status == 404 and "no route" in (getattr(e, "message", "") or ""))


def batch_failure_index(e: Any) -> int:
    """The index a batch error names ("sandboxes[3] ..."), else 0."""
    m = re.search(r"sandboxes\[(\d+)\]", getattr(e, "message", "") or "")
    return int(m.group(1)) if m else 0


def new_request_id() -> str:
    return "py-" + uuid.uuid4().hex


def backoff(attempt: int, base: float = 0.1, cap: float = 5.0) -> float:
    """Exponential from base, capped, with jitter in [d/2, d]."""
    d = min(cap, base * (2 ** min(attempt, 10)))
    return d / 2 + random.random() * d / 2


class Req:
    """One HTTP request of the API."""

    __slots__ = ("method", "path", "query", "body", "ctype", "headers", "retry", "timeout", "gone_ok", "step")

    def __init__(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, Any]] = None,
        json_body: Any = _UNSET,
        body: Optional[bytes] = None,
        ctype: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
        retry: bool = False,
        timeout: Any = _UNSET,
        gone_ok: bool = False,
        step: bool = False,
    ) -> None:
        self.method = method
        if query:
            path = path + "?" + urlencode(query)
        self.path = path
        self.query = query
        if json_body is not _UNSET:
            body = json.dumps(json_body, separators=(",", ":")).encode()
            ctype = "application/json"
        self.body = body
        self.ctype = ctype
        self.headers = headers
        # retry: safe to repeat (GETs, create with a request id, delete).
        self.retry = retry
        # timeout: socket timeout override (None: wait forever); _UNSET: the client's.
        self.timeout = timeout
        # gone_ok: a not_found after a retried attempt means the first one worked.
        self.gone_ok = gone_ok
        # step: a session operation a trajectory numbers (exec, file write, ...).
        self.step = step


def should_retry(req: Req, err: DsecError, attempt: int, retries: int) -> bool:
    return req.retry and err.retryable and attempt < retries


# ---- request builders (shared by both clients) ----------------------------------


def input_body(text: Optional[str] = None, key: Optional[str] = None,
               click: Optional[Any] = None, button: str = "left") -> Dict[str, Any]:
    """The body of POST .../input (fullvm): exactly one of ``text`` (typed;
    "\\n" is Return), ``key`` (a QEMU key name or chord, "ctrl-c") or ``click``
    (an (x, y) pair of display pixels)."""
    given = [v for v in (text, key, click) if v]
    if len(given) != 1:
        raise ValueError("input: give exactly one of text=, key=, click=")
    if text:
        return {"text": text}
    if key:
        return {"key": key}
    x, y = click  # type: ignore[misc]
    return {"click": {"x": int(x), "y": int(y), "button": button}}


def network_body(allow: Optional[Any] = None, rules: Optional[Any] = None, allow_domains: Optional[Any] = None,
                 deny_domains: Optional[Any] = None) -> Dict[str, Any]:
    """A network policy: ``allow`` entries "CIDR[:PORT[-PORT]]", ``rules``
    (names of the operator's rule sets), ``allow_domains`` (names reachable
    once the sandbox resolved them: "pypi.org", "*.pythonhosted.org") and
    ``deny_domains`` (names answered NXDOMAIN); each a string or a list of
    strings. The server validates them (invalid_argument on a bad entry or name)."""

    def strs(v: Optional[Any], what: str) -> List[str]:
        if v is None:
            return []
        if isinstance(v, str):
            return [v]
        out = list(v)
        if not all(isinstance(x, str) for x in out):
            raise TypeError(f"network {what}: want strings, got {out!r}")
        return out

    b: Dict[str, Any] = {}
    for key, v in (("allow", allow), ("rules", rules), ("allow_domains", allow_domains), ("deny_domains", deny_domains)):
        s = strs(v, key)
        if s:
            b[key] = s
    return b


def create_body(
    backend: str,
    image: Optional[str],
    cpu: Optional[float],
    memory: Optional[Size],
    disk: Optional[Size],
    ttl: Optional[Seconds],
    idle_timeout: Optional[Seconds],
    env: Optional[Mapping[str, str]],
    labels: Optional[Mapping[str, str]],
    request_id: Optional[str],
    pids_max: Optional[int] = None,
    user_namespace: Optional[bool] = None,
    network: Optional[Mapping[str, Any]] = None,
    cpu_class: Optional[str] = None,
    ksm: bool = False,
    start_cmd: Optional[str] = None,
    entrypoint: bool = False,
    ready_cmd: Optional[str] = None,
    ready_port: Optional[int] = None,
    ready_timeout: Optional[Seconds] = None,
    wait: bool = True,
    allow_setuid: bool = False,
) -> Dict[str, Any]:
    b: Dict[str, Any] = {"request_id": request_id or new_request_id()}
    if not wait:
        b["wait"] = False
    if allow_setuid:
        b["allow_setuid"] = True
    if start_cmd is not None:
        b["start_cmd"] = str(start_cmd)
    if entrypoint:
        b["entrypoint"] = True
    if ready_cmd is not None:
        b["ready_cmd"] = str(ready_cmd)
    if ready_port is not None:
        # 0 and out-of-range ports go to the server, which names the field.
        b["ready_port"] = int(ready_port) if int(ready_port) != 0 else -1
    rt = seconds(ready_timeout)
    if rt is not None:
        ms = int(round(rt * 1000))
        b["ready_timeout_ms"] = ms if ms > 0 else -1
    if network is not None:
        unknown = set(network) - {"allow", "rules", "allow_domains", "deny_domains"}
        if unknown:
            raise TypeError(f"network: unknown keys {sorted(unknown)}; want allow, rules, allow_domains, deny_domains")
        b["network"] = network_body(network.get("allow"), network.get("rules"), network.get("allow_domains"),
                                    network.get("deny_domains"))
    if cpu_class:
        b["cpu_class"] = str(cpu_class)
    if ksm:
        b["ksm"] = True
    if backend and backend != "container":
        b["backend"] = backend
    if image:
        b["image"] = image
    if cpu:
        b["cpu"] = float(cpu)
    m = parse_size(memory, "memory")
    if m:
        b["memory_bytes"] = m
    d = parse_size(disk, "disk")
    if d:
        b["disk_bytes"] = d
    if pids_max:
        b["pids_max"] = int(pids_max)
    if user_namespace is not None:
        b["user_namespace"] = bool(user_namespace)
    t = seconds(ttl)
    if t:
        b["ttl_seconds"] = max(1, int(round(t)))
    it = seconds(idle_timeout)
    if it:
        b["idle_timeout_seconds"] = max(1, int(round(it)))
    if env:
        b["env"] = {str(k): str(v) for k, v in env.items()}
    if labels:
        b["labels"] = {str(k): str(v) for k, v in labels.items()}
    return b


def exec_body(
    cmd: Cmd,
    timeout: Optional[Seconds],
    env: Optional[Mapping[str, str]],
    cwd: Optional[str],
    user: Optional[str],
    stdin: Union[None, str, bytes],
    max_output: Optional[Size] = None,
) -> Dict[str, Any]:
    b: Dict[str, Any] = {}
    if isinstance(cmd, str):
        b["shell"] = cmd
    else:
        argv = [str(a) for a in cmd]
        if not argv:
            raise InvalidArgumentError("cmd must not be empty")
        b["cmd"] = argv
    t = seconds(timeout)
    if t is not None:
        if t <= 0:
            raise InvalidArgumentError("timeout must be positive")
        b["timeout_ms"] = max(1, int(t * 1000))
    if env:
        b["env"] = {str(k): str(v) for k, v in env.items()}
    if cwd:
        b["cwd"] = cwd
    if user is not None:
        b["user"] = str(user)
    if stdin is not None:
        if isinstance(stdin, str):
            b["stdin"] = stdin
        else:
            b["stdin_base64"] = base64.b64encode(bytes(stdin)).decode()
    mo = parse_size(max_output, "max_output")
    if mo:
        b["max_output_bytes"] = mo
    return b


def with_tty(body: Dict[str, Any], tty: bool, cols: Optional[int], rows: Optional[int]) -> Dict[str, Any]:
    """Adds a terminal request (tty, cols, rows) to an exec body. A size needs
    tty; the server checks its range (cols/rows None: the server's default)."""
    if not tty:
        if cols is not None or rows is not None:
            raise InvalidArgumentError("cols and rows need tty=True")
        return body
    body["tty"] = True
    for k, v in (("cols", cols), ("rows", rows)):
        if v is not None:
            body[k] = check_term_dim(k, v)
    return body


def check_term_dim(what: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidArgumentError(f"{what} must be an int, not {type(v).__name__}")
    return v


def resize_line(cols: int, rows: int) -> bytes:
    c, r = check_term_dim("cols", cols), check_term_dim("rows", rows)
    return b'{"resize":{"cols":%d,"rows":%d}}\n' % (c, r)


def as_bytes(data: Union[str, bytes, bytearray, memoryview]) -> bytes:
    return data.encode() if isinstance(data, str) else bytes(data)


EOF_LINE = b'{"eof":true}\n'


def chunk(data: bytes) -> bytes:
    """data as one chunk of a chunked HTTP/1.1 body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def code_context_id(context: Any) -> str:
    """The id of a code context given as a CodeContext or its id."""
    cid = getattr(context, "id", context)
    if not isinstance(cid, str) or not cid:
        raise ValueError(f"context {context!r}: want a CodeContext or its id")
    return cid


def code_context_path(sid: str, context: Any = None, rest: str = "") -> str:
    """The path of the sandbox's code contexts, or of one of them."""
    p = sandbox_path(sid, "/code/contexts")
    if context is not None:
        p += "/" + esc(code_context_id(context))
    return p + rest


def code_body(code: str, language: Optional[str], context: Any,
              env: Optional[Mapping[str, str]], timeout: Optional[Seconds]) -> Dict[str, Any]:
    """The body of POST /v1/sandboxes/{id}/code:run."""
    if not isinstance(code, str):
        raise TypeError("code must be a str")
    if language and context:
        raise ValueError("give language or context, not both")
    body: Dict[str, Any] = {"code": code}
    if language:
        body["language"] = language
    if context:
        body["context"] = code_context_id(context)
    if env:
        body["env"] = {str(k): str(v) for k, v in env.items()}
    t = seconds(timeout)
    if t is not None:
        body["timeout"] = t
    return body


def code_event(ex: Any, ev: Mapping[str, Any], on_stdout: Optional[Callable[[str], Any]],
               on_stderr: Optional[Callable[[str], Any]], on_result: Optional[Callable[[Any], Any]],
               on_error: Optional[Callable[[Any], Any]]) -> None:
    """Adds one event of a code:run answer to Execution ex, calling its callback."""
    from .types import CodeError, CodeResult  # noqa: PLC0415 - types imports errors only

    t = ev.get("type")
    if t == "stdout":
        ex.stdout.append(ev.get("text", ""))
        if on_stdout:
            on_stdout(ev.get("text", ""))
    elif t == "stderr":
        ex.stderr.append(ev.get("text", ""))
        if on_stderr:
            on_stderr(ev.get("text", ""))
    elif t == "result":
        r = CodeResult.from_json(ev)
        ex.results.append(r)
        if on_result:
            on_result(r)
    elif t == "error":
        ex.error = CodeError(ev.get("name", ""), ev.get("value", ""), ev.get("traceback", ""))
        if on_error:
            on_error(ex.error)
    elif t == "number_of_executions":
        ex.execution_count = ev.get("execution_count")


def exec_http_timeout(client_timeout: Optional[float], cmd_timeout: Optional[Seconds]) -> Optional[float]:
    """Socket timeout for a blocking exec: long enough for the command."""
    t = seconds(cmd_timeout)
    if client_timeout is None:
        return None
    return max(client_timeout, (t if t is not None else 60.0) + 30.0)


def stream_input_lines(stdin: Union[None, str, bytes, Iterable[bytes]]) -> Iterable[bytes]:
    """NDJSON input lines (after the request line) for a sync iterable stdin."""
    if stdin is not None:
        if isinstance(stdin, str):
            stdin = stdin.encode()
        if isinstance(stdin, (bytes, bytearray, memoryview)):
            data = bytes(stdin)
            for i in range(0, len(data), 48 << 10):
                yield stdin_line(data[i : i + (48 << 10)])
        else:
            for chunk in stdin:
                if isinstance(chunk, str):
                    chunk = chunk.encode()
                if chunk:
                    for i in range(0, len(chunk), 48 << 10):
                        yield stdin_line(chunk[i : i + (48 << 10)])
    yield EOF_LINE


def stdin_line(data: bytes) -> bytes:
    return b'{"stdin":"' + base64.b64encode(data) + b'"}\n'


def signal_line(sig: Union[str, int]) -> bytes:
    return json.dumps({"signal": str(sig)}).encode() + b"\n"


def process_path(sid: str, pid: str, rest: str = "") -> str:
    return sandbox_path(sid, "/processes/" + esc(pid) + rest)


def http_proxy_path(sid: str, port: int, path: str) -> str:
    if not path.startswith("/"):
        path = "/" + path
    return sandbox_path(sid, f"/http/{int(port)}{path}")


def files_req(method: str, sid: str, sub: str, path: str, **kw: Any) -> Req:
    q: Dict[str, str] = {"path": path}
    extra = kw.pop("query", None)
    if extra:
        q.update(extra)
    return Req(method, sandbox_path(sid, "/files" + sub), query=q, retry=method == "GET", **kw)


# ---- FnCall -------------------------------------------------------------------------

_LANG_MAIN = {"python3": "main.py", "python": "main.py", "c": "main.c", "c++": "main.cpp", "cpp": "main.cpp",
              "go": "main.go", "bash": "main.sh"}


def fncall_body(
    language: Optional[str] = None,
    source: Optional[str] = None,
    files: Optional[Mapping[str, str]] = None,
    tests: Optional[Sequence[Any]] = None,
    limits: Optional[Mapping[str, Any]] = None,
    cmd: Optional[Cmd] = None,
    image: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    device: Optional[str] = None,
) -> Dict[str, Any]:
    """The body of POST /v1/fncall. ``source`` is the program (main.<ext> of the
    language); ``files`` more files (or all of them) by path relative to /w.
    ``tests``: dicts {"stdin", "expected_output", "compare"} (compare: a mode
    string or {"mode", "epsilon"}), or (stdin, expected_output) pairs; default one
    test with empty stdin. ``limits``: cpu_time_ms, wall_time_ms, memory_bytes
    (also "memory": "256m"), processes, output_bytes, file_size_bytes."""
    b: Dict[str, Any] = {}
    lang = language
    if lang == "python":
        lang = "python3"
    elif lang == "cpp":
        lang = "c++"
    if lang:
        b["language"] = lang
    if cmd is not None:
        b["cmd"] = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else [str(a) for a in cmd]
    if not lang and cmd is None:
        raise InvalidArgumentError("fncall: language or cmd is required")
    fs: Dict[str, str] = {}
    if source is not None:
        if not lang or lang not in _LANG_MAIN:
            raise InvalidArgumentError(f"fncall: source= needs a known language (got {language!r}); use files=")
        fs[_LANG_MAIN[lang]] = source
    if files:
        fs.update({str(k): v if isinstance(v, str) else bytes(v).decode() for k, v in files.items()})
    if fs:
        b["files"] = fs
    ts: List[Dict[str, Any]] = []
    for t in tests if tests is not None else [{}]:
        if isinstance(t, (tuple, list)):
            t = {"stdin": t[0], "expected_output": t[1] if len(t) > 1 else None}
        d: Dict[str, Any] = {}
        if t.get("stdin"):
            d["stdin"] = t["stdin"]
        if t.get("expected_output") is not None:
            d["expected_output"] = t["expected_output"]
        c = t.get("compare")
        if c:
            d["compare"] = {"mode": c} if isinstance(c, str) else dict(c)
        ts.append(d)
    if not ts:
        raise InvalidArgumentError("fncall: at least one test is required")
    b["tests"] = ts
    if limits:
        lim = dict(limits)
        if "memory" in lim:
            lim["memory_bytes"] = lim.pop("memory")
        for k in ("memory_bytes", "output_bytes", "file_size_bytes"):
            if k in lim and lim[k] is not None:
                lim[k] = parse_size(lim[k], k)
        b["limits"] = {k: v for k, v in lim.items() if v is not None}
    if image:
        b["image"] = image
    if env:
        b["env"] = {str(k): str(v) for k, v in env.items()}
    if device:
        b["device"] = device
    return b


def fncall_http_timeout(client_timeout: Optional[float]) -> Optional[float]:
    return None if client_timeout is None else max(client_timeout, 600.0)


# ---- trajectories -------------------------------------------------------------------

TRAJECTORY_HEADER = "X-Dsec-Trajectory"
STEP_HEADER = "X-Dsec-Step"
REPLAYED_HEADER = "x-dsec-replayed"

# Errors the server answers before logging a step (or instead of it): the same
# step number is still free, so the counter does not advance.
_NOT_LOGGED = {"trajectory_diverged", "conflict", "invalid_argument", "unauthorized",
               "trajectory_sandbox_lost", "not_implemented", "payload_too_large"}


def step_logged(err: Optional[BaseException]) -> bool:
    """Whether the server logged the step that ended with err (None: success).
    outcome_unknown counts as logged: the step is never resolved and the trainer
    moves on. Retryable dsec errors and network errors are not logged (a re-issue
    with the same number replays the step if it did finish)."""
    if err is None:
        return True
    if not isinstance(err, DsecError):
        return False
    if err.code == "outcome_unknown":
        return True
    if err.code in _NOT_LOGGED or err.status == 0 or err.retryable or err.infrastructure:
        return False
    return True


class StepCounter:
    """The step numbers of one Trajectory object. A step takes the next number when
    it is sent; the counter moves past it once the server has logged it (success,
    a logged error, or outcome_unknown). Steps of one trajectory are sequential:
    issue them one at a time."""

    def __init__(self, traj_id: str, start: int = 1) -> None:
        if not traj_id or not re.match(r"^[A-Za-z0-9._:-]{1,128}$", traj_id):
            raise InvalidArgumentError(f"trajectory id {traj_id!r}: 1-128 of A-Z a-z 0-9 . _ : -")
        if start < 1:
            raise InvalidArgumentError("trajectory steps start at 1")
        self.id = traj_id
        self.next = start
        self.replayed_steps = 0
        self.live_steps = 0
        self.last_replayed = False

    def begin(self) -> Tuple[int, Dict[str, str]]:
        n = self.next
        return n, {TRAJECTORY_HEADER: self.id, STEP_HEADER: str(n)}

    def end(self, n: int, err: Optional[BaseException] = None, replayed: bool = False) -> None:
        if step_logged(err):
            if n + 1 > self.next:
                self.next = n + 1
            if err is None:
                self.last_replayed = replayed
                if replayed:
                    self.replayed_steps += 1
                else:
                    self.live_steps += 1


def with_headers(req: Req, extra: Mapping[str, str]) -> Req:
    h = dict(req.headers or {})
    h.update(extra)
    req.headers = h
    return req


def decode_json(body: bytes) -> Any:
    return json.loads(body) if body else None


def lower_headers(items: Iterable[Tuple[str, str]]) -> Dict[str, str]:
    h: Dict[str, str] = {}
    for k, v in items:
        k = k.lower()
        h[k] = h[k] + ", " + v if k in h else v
    return h


def sandboxes_from_list(doc: Any) -> List[Mapping[str, Any]]:
    return list((doc or {}).get("sandboxes") or [])


# ---- Dockerfile builds (POST /v1/images:build) --------------------------------------


def build_path(name: str, dockerfile: Optional[str], target: Optional[str],
               build_args: Optional[Mapping[str, str]], network: Optional[str],
               run_timeout: Optional[Seconds]) -> str:
    """The streamed build's path and query (stream=true: NDJSON events)."""
    if not name:
        raise InvalidArgumentError("build: name is required")
    q: List[Tuple[str, str]] = [("name", name), ("stream", "true")]
    if dockerfile:
        q.append(("dockerfile", dockerfile))
    if target:
        q.append(("target", target))
    for k, v in (build_args or {}).items():
        q.append(("build_arg", f"{k}={v}"))
    if network:
        q.append(("network", network))
    if run_timeout is not None:
        q.append(("run_timeout_ms", str(int(round((seconds(run_timeout) or 0) * 1000)))))
    return "/v1/images:build?" + urlencode(q)


def build_event(line: bytes) -> Tuple[str, Any]:
    """One NDJSON line of a streamed build: ("log", text), ("result", dict) or
    ("keepalive", None); an "error" event raises its error (the classes of
    errors.py, as an answer with that code would)."""
    ev = json.loads(line)
    typ = ev.get("type")
    if typ == "log":
        return "log", str(ev.get("log", ""))
    if typ == "result":
        return "result", dict(ev.get("result") or {})
    if typ == "error":
        raise error_from_response(0, json.dumps({"error": ev.get("error") or {}}).encode())
    return "keepalive", None


RUN_PATH = "/v1/sandboxes:run"


def run_request(cmd: Cmd, create: Mapping[str, Any], timeout: Optional[Seconds], cwd: Optional[str],
                user: Optional[str], stdin: Union[None, str, bytes], remove: bool) -> bytes:
    """The NDJSON body of POST /v1/sandboxes:run: the RunRequest line (create
    takes create()'s keyword arguments, env included: it is every process's),
    then the end of stdin."""
    kw: Dict[str, Any] = dict(backend="container", image=None, cpu=None, memory=None, disk=None, ttl=None,
                              idle_timeout=None, env=None, labels=None, request_id=None)
    known = inspect.signature(create_body).parameters
    for k in create:
        if k not in known or k == "wait":
            raise TypeError(f"run() got an unexpected keyword argument {k!r}")
    kw.update(create)
    first = {"sandbox": create_body(**kw), "exec": exec_body(cmd, timeout, None, cwd, user, stdin), "remove": remove}
    return (json.dumps(first) + "\n" + json.dumps({"eof": True}) + "\n").encode()


class RunEvents:
    """Collects the NDJSON events of POST /v1/sandboxes:run into a RunResult."""

    def __init__(self) -> None:
        self.sandbox: Optional[Dict[str, Any]] = None
        self.out = bytearray()
        self.err = bytearray()
        self.exit: Optional[Dict[str, Any]] = None

    def feed(self, line: bytes) -> None:
        ev = json.loads(line)
        typ = ev.get("type")
        if typ == "sandbox":
            self.sandbox = ev.get("sandbox") or {}
        elif typ in ("stdout", "stderr"):
            d = ev.get("data")
            (self.out if typ == "stdout" else self.err).extend(base64.b64decode(d) if d else b"")
        elif typ == "exit":
            self.exit = ev
        elif typ == "error":
            raise error_from_response(200, json.dumps({"error": ev.get("error") or {}}).encode())

    def result(self) -> Any:
        from .types import RunResult, SandboxInfo  # noqa: PLC0415 - types imports errors only
        if self.exit is None:
            raise InfrastructureError("run stream ended before the exit event", retryable=False)
        res = RunResult.from_json(self.exit.get("result") or {})
        res.stdout = self.out.decode("utf-8", "replace")
        res.stderr = self.err.decode("utf-8", "replace")
        res.sandbox = SandboxInfo.from_json(self.sandbox) if self.sandbox is not None else None
        if self.exit.get("error"):
            res.remove_error = error_from_response(200, json.dumps({"error": self.exit["error"]}).encode())
        return res

"""Plain data returned by the SDK."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Dict, List, Mapping, NamedTuple, Optional

from .errors import CommandError, DsecError

__all__ = [
    "ExecResult",
    "FileInfo",
    "ProcessInfo",
    "SandboxInfo",
    "HTTPResponse",
    "StreamChunk",
    "FnCallResult",
    "FnCallTestResult",
    "FnCallCompile",
    "TrajectoryInfo",
    "TrajectoryStep",
    "RebuildResult",
    "parse_time",
]


def parse_time(s: Optional[str]) -> Optional[datetime]:
    """Parse an RFC 3339 timestamp as Go writes it (nanoseconds, 'Z')."""
    if not s:
        return None
    t = s.strip()
    if t.endswith("Z") or t.endswith("z"):
        t = t[:-1] + "+00:00"
    # Python < 3.11 takes at most 6 fractional digits.
    if "." in t:
        head, rest = t.split(".", 1)
        i = 0
        while i < len(rest) and rest[i].isdigit():
            i += 1
        frac, tz = rest[:i], rest[i:]
        t = head + "." + (frac + "000000")[:6] + tz
    try:
        dt = datetime.fromisoformat(t)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt


@dataclass
class ExecResult:
    """How a command ended. A non-zero exit is not an exception: see :meth:`check`."""

    exit_code: int
    stdout: str = ""
    stderr: str = ""
    duration: float = 0.0
    """Wall time from start to exit, in seconds."""
    signal: Optional[str] = None
    timed_out: bool = False
    oom_killed: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    error: Optional[str] = None
    """Why the command could not start (e.g. not found: exit code 127)."""
    replayed: bool = False
    """Answered from a trajectory log without running again."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.signal

    @property
    def truncated(self) -> bool:
        return self.stdout_truncated or self.stderr_truncated

    def check(self, cmd: Any = None) -> "ExecResult":
        """Return self if the command exited 0, else raise :class:`CommandError`."""
        if not self.ok:
            raise CommandError(self, cmd)
        return self

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ExecResult":
        out, err = d.get("stdout") or "", d.get("stderr") or ""
        if d.get("output_encoding") == "base64":
            out = base64.b64decode(out).decode("utf-8", "replace")
            err = base64.b64decode(err).decode("utf-8", "replace")
        return cls(
            exit_code=int(d.get("exit_code", -1)),
            stdout=out,
            stderr=err,
            duration=float(d.get("duration_ms") or 0.0) / 1000.0,
            signal=d.get("signal") or None,
            timed_out=bool(d.get("timed_out")),
            oom_killed=bool(d.get("oom_killed")),
            stdout_truncated=bool(d.get("stdout_truncated")),
            stderr_truncated=bool(d.get("stderr_truncated")),
            error=d.get("error") or None,
            replayed=bool(d.get("replayed")),
        )


@dataclass
class RunResult(ExecResult):
    """What :meth:`Client.run` answers: how the command ended, its output, the
    sandbox it ran in and, with ``remove``, whether deleting it failed."""

    sandbox: Optional["SandboxInfo"] = None
    """The sandbox the run created (gone once the run returns, with ``remove``)."""
    remove_error: Optional[DsecError] = None
    """Why the sandbox could not be deleted after the command ended (``remove``)."""


@dataclass
class FileInfo:
    """One file inside a sandbox."""

    name: str
    path: str
    size: int
    mode: int
    type: str  # file, dir, symlink, other
    mod_time: Optional[datetime] = None
    link: Optional[str] = None
    uid: int = 0
    gid: int = 0
    # Extended attributes in the "user." namespace, by full name.
    xattrs: Dict[str, str] = field(default_factory=dict)

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FileInfo":
        return cls(
            name=d.get("name", ""),
            path=d.get("path", ""),
            size=int(d.get("size", 0)),
            mode=int(d.get("mode", 0)),
            type=d.get("type", ""),
            mod_time=parse_time(d.get("mod_time")),
            link=d.get("link") or None,
            uid=int(d.get("uid", 0)),
            gid=int(d.get("gid", 0)),
            xattrs=dict(d.get("xattrs") or {}),
        )


@dataclass
class ProcessInfo:
    """A background process as the server describes it."""

    id: str
    pid: int
    cmd: List[str]
    running: bool
    started_at: Optional[datetime] = None
    result: Optional[ExecResult] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ProcessInfo":
        r = d.get("result")
        return cls(
            id=str(d.get("id", "")),
            pid=int(d.get("pid", 0)),
            cmd=list(d.get("cmd") or []),
            running=bool(d.get("running")),
            started_at=parse_time(d.get("started_at")),
            result=ExecResult.from_json(r) if r else None,
        )


@dataclass
class SandboxInfo:
    """A sandbox's description (GET /v1/sandboxes/{id})."""

    id: str
    backend: str = "container"
    image: str = ""
    state: str = ""
    cpu: float = 0.0
    memory_bytes: int = 0
    disk_bytes: int = 0
    pids_max: int = 0
    created_at: Optional[datetime] = None
    expires_at: Optional[datetime] = None
    idle_timeout_seconds: int = 0
    last_active_at: Optional[datetime] = None
    env: Dict[str, str] = field(default_factory=dict)
    labels: Dict[str, str] = field(default_factory=dict)
    request_id: Optional[str] = None
    network: Optional["NetworkStatus"] = None
    """Egress policy and denied-attempt counter; None: loopback only."""
    cpu_class: str = "ls"
    ksm: bool = False
    allow_setuid: bool = False
    """Setuid programs (sudo) work in it (create's allow_setuid)."""
    reclaimed: bool = False
    """Its memory was pushed out of RAM (pause(reclaim=True)); resume brings it back."""
    image_ref: Optional[str] = None
    """A registry reference's normalised form (docker.io/library/python:3.12-slim)."""
    image_digest: Optional[str] = None
    """The digest the reference resolved to at create (kept whatever the tag does)."""
    start: Optional[StartStatus] = None
    """The start command's outcome (create's start_cmd or entrypoint); None without one."""
    pull: Optional[Dict[str, Any]] = None
    """State "pulling" (create with wait=False): how far the image's fetch got (as pull_progress)."""
    error: Optional[Dict[str, Any]] = None
    """State "failed": why the create failed (code, message, infrastructure, retryable)."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SandboxInfo":
        return cls(
            id=d["id"],
            backend=d.get("backend", ""),
            image=d.get("image", ""),
            state=d.get("state", ""),
            cpu=float(d.get("cpu") or 0),
            memory_bytes=int(d.get("memory_bytes") or 0),
            disk_bytes=int(d.get("disk_bytes") or 0),
            pids_max=int(d.get("pids_max") or 0),
            created_at=parse_time(d.get("created_at")),
            expires_at=parse_time(d.get("expires_at")),
            idle_timeout_seconds=int(d.get("idle_timeout_seconds") or 0),
            last_active_at=parse_time(d.get("last_active_at")),
            env=dict(d.get("env") or {}),
            labels=dict(d.get("labels") or {}),
            request_id=d.get("request_id") or None,
            network=NetworkStatus.from_json(d["network"]) if d.get("network") else None,
            cpu_class=d.get("cpu_class") or "ls",
            ksm=bool(d.get("ksm")),
            allow_setuid=bool(d.get("allow_setuid")),
            reclaimed=bool(d.get("reclaimed")),
            image_ref=d.get("image_ref") or None,
            image_digest=d.get("image_digest") or None,
            start=StartStatus.from_json(d["start"]) if d.get("start") else None,
            pull=dict(d["pull"]) if d.get("pull") else None,
            error=dict(d["error"]) if d.get("error") else None,
        )


@dataclass
class ReclaimResult:
    """What ``pause(reclaim=True)`` pushed out of RAM."""

    swap: bool = False
    """Whether the node had swap for anonymous memory (else page cache only)."""
    swapped_bytes: int = 0
    page_cache_dropped_bytes: int = 0
    resident_before_bytes: int = 0
    resident_after_bytes: int = 0
    method: str = ""
    note: str = ""
    """e.g. "no swap: page cache only"."""
    duration_ms: float = 0.0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ReclaimResult":
        return cls(
            swap=bool(d.get("swap")),
            swapped_bytes=int(d.get("swapped_bytes") or 0),
            page_cache_dropped_bytes=int(d.get("page_cache_dropped_bytes") or 0),
            resident_before_bytes=int(d.get("resident_before_bytes") or 0),
            resident_after_bytes=int(d.get("resident_after_bytes") or 0),
            method=d.get("method") or "",
            note=d.get("note") or "",
            duration_ms=float(d.get("duration_ms") or 0),
        )


@dataclass
class StartStatus:
    """The outcome of a create's start command (start_cmd or entrypoint):
    state is "starting", "started" (nothing checks readiness), "ready" or
    "failed" (error says why)."""

    state: str = ""
    process_id: str = ""
    cmd: List[str] = field(default_factory=list)
    error: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "StartStatus":
        return cls(state=d.get("state", ""), process_id=d.get("process_id", ""),
                   cmd=list(d.get("cmd") or []), error=d.get("error", ""))


@dataclass
class NetworkStatus:
    """A sandbox's egress: its policy, its address on the link to the node, and
    how many connection attempts the policy refused."""

    allow: List[str] = field(default_factory=list)
    rules: List[str] = field(default_factory=list)
    address: str = ""
    denied: int = 0
    allow_domains: List[str] = field(default_factory=list)
    deny_domains: List[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "NetworkStatus":
        return cls(allow=list(d.get("allow") or []), rules=list(d.get("rules") or []),
                   address=d.get("address", ""), denied=int(d.get("denied") or 0),
                   allow_domains=list(d.get("allow_domains") or []), deny_domains=list(d.get("deny_domains") or []))


class HTTPResponse(NamedTuple):
    """The answer of :meth:`Sandbox.http`: unpacks as ``status, headers, body``.
    Header names are lower-case."""

    status: int
    headers: Dict[str, str]
    body: bytes

    def json(self) -> Any:
        import json

        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class StreamChunk(NamedTuple):
    """Output of :meth:`Sandbox.exec_stream`: ``stream`` is "stdout" or "stderr"."""

    stream: str
    data: bytes


# ---- FnCall -----------------------------------------------------------------------


@dataclass
class FnCallTestResult:
    """One test's outcome. ``verdict``: accepted, wrong_answer, time_limit,
    memory_limit, runtime_error, output_limit, system_error."""

    verdict: str
    exit_code: int = 0
    signal: Optional[str] = None
    time_limit: Optional[str] = None
    """Which limit a time_limit verdict hit: "cpu" or "wall"."""
    cpu_time_ms: float = 0.0
    wall_time_ms: float = 0.0
    peak_memory_bytes: int = 0
    """Measured peak RSS, also with a memory_limit verdict (see ``limit_hit``)."""
    limit_hit: bool = False
    """Set with a memory_limit verdict: the run hit its memory limit."""
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    message: Optional[str] = None

    @property
    def accepted(self) -> bool:
        return self.verdict == "accepted"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FnCallTestResult":
        return cls(
            verdict=str(d.get("verdict", "")),
            exit_code=int(d.get("exit_code") or 0),
            signal=d.get("signal") or None,
            time_limit=d.get("time_limit") or None,
            cpu_time_ms=float(d.get("cpu_time_ms") or 0),
            wall_time_ms=float(d.get("wall_time_ms") or 0),
            peak_memory_bytes=int(d.get("peak_memory_bytes") or 0),
            limit_hit=bool(d.get("limit_hit")),
            stdout=d.get("stdout") or "",
            stderr=d.get("stderr") or "",
            stdout_truncated=bool(d.get("stdout_truncated")),
            stderr_truncated=bool(d.get("stderr_truncated")),
            message=d.get("message") or None,
        )


@dataclass
class FnCallCompile:
    """The compile step: ``verdict`` accepted, compile_error or system_error;
    ``output`` holds the compiler's diagnostics."""

    verdict: str
    exit_code: int = 0
    output: str = ""
    cached: bool = False
    wall_time_ms: float = 0.0
    cpu_time_ms: float = 0.0
    message: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FnCallCompile":
        return cls(
            verdict=str(d.get("verdict", "")),
            exit_code=int(d.get("exit_code") or 0),
            output=d.get("output") or "",
            cached=bool(d.get("cached")),
            wall_time_ms=float(d.get("wall_time_ms") or 0),
            cpu_time_ms=float(d.get("cpu_time_ms") or 0),
            message=d.get("message") or None,
        )


@dataclass
class FnCallResult:
    """The answer of ``client.fncall`` (and one item of ``fncall_batch``, with its
    ``index``). ``verdict`` summarises the call: compile_error, else the first test
    verdict that is not accepted, else accepted. ``error`` is set (a DsecError, not
    raised) when a batch call could not be run at all (verdict "" for bad input,
    system_error for an infrastructure failure)."""

    verdict: str
    tests: List[FnCallTestResult] = field(default_factory=list)
    compile: Optional[FnCallCompile] = None
    index: int = 0
    error: Optional[Exception] = None

    @property
    def accepted(self) -> bool:
        return self.verdict == "accepted"

    @property
    def summary(self) -> Dict[str, int]:
        """How many tests got each verdict, e.g. {"accepted": 3, "wrong_answer": 1}."""
        out: Dict[str, int] = {}
        for t in self.tests:
            out[t.verdict] = out.get(t.verdict, 0) + 1
        return out

    @property
    def passed(self) -> int:
        """The number of accepted tests."""
        return sum(1 for t in self.tests if t.verdict == "accepted")

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FnCallResult":
        from .errors import error_from_response
        import json

        err = d.get("error")
        c = d.get("compile")
        return cls(
            verdict=str(d.get("verdict") or ""),
            tests=[FnCallTestResult.from_json(t) for t in d.get("tests") or []],
            compile=FnCallCompile.from_json(c) if c else None,
            index=int(d.get("index") or 0),
            error=error_from_response(200, json.dumps({"error": err}).encode()) if err else None,
        )


# ---- trajectories -------------------------------------------------------------------


@dataclass
class TrajectoryStep:
    """One logged step (GET /v1/trajectories/{id} and one export line)."""

    trajectory: str
    step: int
    op: str
    """exec, exec_stream, start_process, write_file, upload_archive, read_file,
    mkdir, remove or http."""
    fingerprint: str = ""
    state: str = ""
    """started, finished or unknown."""
    sandbox_id: str = ""
    args: Any = None
    status: int = 0
    result: Any = None
    """The logged answer when it is JSON (an exec result, a file info, an error)."""
    body: Optional[bytes] = None
    """Any other answer (file bytes, exec/stream events, an HTTP body)."""
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None
    duration_ms: float = 0.0
    truncated: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "TrajectoryStep":
        b = d.get("body")
        return cls(
            trajectory=d.get("trajectory", ""),
            step=int(d.get("step") or 0),
            op=d.get("op", ""),
            fingerprint=d.get("fingerprint", ""),
            state=d.get("state", ""),
            sandbox_id=d.get("sandbox_id", ""),
            args=d.get("args"),
            status=int(d.get("status") or 0),
            result=d.get("result"),
            body=base64.b64decode(b) if b else None,
            started_at=parse_time(d.get("started_at")),
            finished_at=parse_time(d.get("finished_at")),
            duration_ms=float(d.get("duration_ms") or 0),
            truncated=bool(d.get("truncated")),
            raw=dict(d),
        )


@dataclass
class TrajectoryInfo:
    """A logged trajectory (``steps`` filled by ``traj.get()``)."""

    id: str
    sandbox_id: str = ""
    sandboxes: List[str] = field(default_factory=list)
    last_step: int = 0
    step_count: int = 0
    rebuilds: int = 0
    created_at: Optional[datetime] = None
    updated_at: Optional[datetime] = None
    create: Dict[str, Any] = field(default_factory=dict)
    steps: List[TrajectoryStep] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "TrajectoryInfo":
        return cls(
            id=d.get("id", ""),
            sandbox_id=d.get("sandbox_id", ""),
            sandboxes=list(d.get("sandboxes") or []),
            last_step=int(d.get("last_step") or 0),
            step_count=int(d.get("step_count") or 0),
            rebuilds=int(d.get("rebuilds") or 0),
            created_at=parse_time(d.get("created_at")),
            updated_at=parse_time(d.get("updated_at")),
            create=dict(d.get("create") or {}),
            steps=[TrajectoryStep.from_json(s) for s in d.get("steps") or []],
        )


@dataclass
class RebuildResult:
    """The answer of ``traj.rebuild()``: the new sandbox and what happened to each
    logged step (``steps``: dicts with step, op, action, matched, detail)."""

    trajectory: str
    sandbox_id: str
    old_sandbox_id: str = ""
    reexecuted: int = 0
    mismatched: int = 0
    steps: List[Dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "RebuildResult":
        return cls(
            trajectory=d.get("trajectory", ""),
            sandbox_id=d.get("sandbox_id", ""),
            old_sandbox_id=d.get("old_sandbox_id", ""),
            reexecuted=int(d.get("reexecuted") or 0),
            mismatched=int(d.get("mismatched") or 0),
            steps=list(d.get("steps") or []),
        )


@dataclass
class CodeResult:
    """One result of a cell (:meth:`Sandbox.run_code`): the last expression's
    value (``is_main_result``) or something the cell displayed, in each MIME
    representation the kernel gave: ``text``, ``html``, ``png`` (base64), ...;
    other MIME types are in ``extra``."""

    is_main_result: bool = False
    text: Optional[str] = None
    html: Optional[str] = None
    markdown: Optional[str] = None
    svg: Optional[str] = None
    png: Optional[str] = None
    jpeg: Optional[str] = None
    pdf: Optional[str] = None
    latex: Optional[str] = None
    json: Any = None
    javascript: Optional[str] = None
    data: Any = None
    chart: Any = None
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CodeResult":
        names = set(cls.__dataclass_fields__) - {"extra", "is_main_result"}
        return cls(is_main_result=bool(d.get("is_main_result")), extra=dict(d.get("extra") or {}),
                   **{k: d[k] for k in names if k in d})


@dataclass
class CodeContext:
    """A context of the sandbox's code interpreter (:meth:`Sandbox.create_code_context`):
    one kernel of ``language`` in ``cwd``, whose state the cells run in it share
    (``run_code(context=...)``)."""

    id: str
    language: str = ""
    cwd: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CodeContext":
        return cls(id=str(d.get("id") or ""), language=str(d.get("language") or ""), cwd=str(d.get("cwd") or ""))


@dataclass
class CodeError:
    """The error a cell raised: its class name, message and traceback."""

    name: str
    value: str
    traceback: str = ""


@dataclass
class Execution:
    """What a cell did (:meth:`Sandbox.run_code`): its results, what it wrote to
    stdout and stderr (in the chunks it wrote), the error it raised if any, and
    its number in the context."""

    results: List[CodeResult] = field(default_factory=list)
    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)
    error: Optional[CodeError] = None
    execution_count: Optional[int] = None

    @property
    def text(self) -> Optional[str]:
        """The main result's text (the last expression's value), if any."""
        for r in self.results:
            if r.is_main_result:
                return r.text
        return None

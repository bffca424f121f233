"""Plain data returned by the SDK."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Dict, List, Mapping, NamedTuple, Optional

from .errors import CommandError

__all__ = [
    "ExecResult",
    "FileInfo",
    "ProcessInfo",
    "SandboxInfo",
    "HTTPResponse",
    "StreamChunk",
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
        )


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
        )


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

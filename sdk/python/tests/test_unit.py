"""Tests that need no dsec server: argument conversion, error mapping, retry policy
(against a stub HTTP server), safe tar extraction."""

from __future__ import annotations

import asyncio
import io
import json
import os
import tarfile
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List

import pytest

import dsec
from dsec import _core, _tar
from dsec.errors import error_from_response


def test_parse_size() -> None:
    assert _core.parse_size("512m") == 512 << 20
    assert _core.parse_size("1g") == 1 << 30
    assert _core.parse_size("1.5GiB") == 3 << 29
    assert _core.parse_size("100k") == 100 << 10
    assert _core.parse_size("4096") == 4096
    assert _core.parse_size(123) == 123
    assert _core.parse_size(None) is None
    for bad in ("lots", "-1m", "1x"):
        with pytest.raises(dsec.InvalidArgumentError):
            _core.parse_size(bad)


def test_create_body() -> None:
    b = _core.create_body("container", "debian", 0.5, "1g", "2g", timedelta(hours=1), 30, {"A": 1}, {"l": "v"},
                          None)
    assert b["request_id"].startswith("py-")
    assert (b["memory_bytes"], b["disk_bytes"], b["ttl_seconds"], b["idle_timeout_seconds"]) == (
        1 << 30, 2 << 30, 3600, 30)
    assert b["env"] == {"A": "1"} and "backend" not in b
    assert "user_namespace" not in b  # unset: the server's --userns
    assert _core.create_body("container", None, None, None, None, None, None, None, None, "r", None,
                             False)["user_namespace"] is False
    e = _core.exec_body("echo hi", 1.5, None, None, None, b"\x00")
    assert e == {"shell": "echo hi", "timeout_ms": 1500, "stdin_base64": "AA=="}
    assert _core.exec_body(["a", 1], None, None, "/x", "1000", "in")["cmd"] == ["a", "1"]
    with pytest.raises(dsec.InvalidArgumentError):
        _core.exec_body([], None, None, None, None, None)


@pytest.mark.parametrize("code,status,cls,infra,retry", [
    ("unauthorized", 401, dsec.AuthError, False, False),
    ("invalid_argument", 400, dsec.InvalidArgumentError, False, False),
    ("not_found", 404, dsec.NotFoundError, False, False),
    ("conflict", 409, dsec.ConflictError, False, False),
    ("already_exists", 409, dsec.ConflictError, False, False),
    ("payload_too_large", 413, dsec.PayloadTooLargeError, False, False),
    ("resource_exhausted", 429, dsec.InfrastructureError, True, True),
    ("deadline_exceeded", 504, dsec.InfrastructureError, True, True),
    ("unavailable", 503, dsec.InfrastructureError, True, True),
    ("internal", 500, dsec.InfrastructureError, True, True),
    ("sandbox_gone", 410, dsec.SandboxGoneError, True, False),
    ("bad_gateway", 502, dsec.BadGatewayError, False, False),
    ("trajectory_diverged", 409, dsec.TrajectoryDivergedError, False, False),
    ("outcome_unknown", 500, dsec.OutcomeUnknownError, True, False),
    ("start_failed", 422, dsec.StartFailedError, False, False),
])
def test_error_mapping(code: str, status: int, cls: type, infra: bool, retry: bool) -> None:
    body = json.dumps({"error": {"code": code, "message": "m", "infrastructure": infra, "retryable": retry}})
    e = error_from_response(status, body.encode())
    assert type(e) is cls and isinstance(e, dsec.DsecError)
    assert (e.code, e.status, e.message, e.infrastructure, e.retryable) == (code, status, "m", infra, retry)
    assert code in str(e)


def test_error_without_body() -> None:
    e = error_from_response(429, b"slow down")
    assert isinstance(e, dsec.InfrastructureError) and e.retryable and e.code == "resource_exhausted"
    e = error_from_response(503, b"")
    assert isinstance(e, dsec.InfrastructureError) and e.retryable
    e = error_from_response(401, b"<html>")
    assert isinstance(e, dsec.AuthError)
    e = error_from_response(418, b"")
    assert isinstance(e, dsec.InvalidArgumentError)


def test_exec_result() -> None:
    r = dsec.ExecResult.from_json({"exit_code": 0, "stdout": "a", "stderr": "", "duration_ms": 12.5})
    assert r.ok and r.duration == 0.0125 and r.check() is r
    r = dsec.ExecResult.from_json({"exit_code": -1, "signal": "SIGKILL", "timed_out": True, "stdout": "",
                                   "stderr": "late", "duration_ms": 1})
    with pytest.raises(dsec.CommandError, match="timed out") as ei:
        r.check("sleep 9")
    assert ei.value.result is r
    assert not isinstance(ei.value, dsec.DsecError)


def test_resolve_config(monkeypatch: Any, tmp_path: Any) -> None:
    (tmp_path / "token").write_text(" filetok\n")
    monkeypatch.delenv("DSEC_ADDR", raising=False)
    monkeypatch.delenv("DSEC_TOKEN", raising=False)
    monkeypatch.setenv("DSEC_DATA_DIR", str(tmp_path))
    c = dsec.Client()
    assert c.addr == "http://127.0.0.1:7070" and c.token == "filetok"
    monkeypatch.setenv("DSEC_ADDR", "http://h:1")
    monkeypatch.setenv("DSEC_TOKEN", "envtok")
    a = dsec.AsyncClient()
    assert a.addr == "http://h:1" and a.token == "envtok"
    assert dsec.Client("x:9", "t").addr == "http://x:9"


# ---- safe extraction ----------------------------------------------------------------


def _mktar(*members: tarfile.TarInfo) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for m in members:
            tf.addfile(m, io.BytesIO(b"x" * m.size) if m.isfile() else None)
    return buf.getvalue()


@pytest.mark.parametrize("name,kind,link", [
    ("../evil", tarfile.REGTYPE, ""),
    ("/abs", tarfile.REGTYPE, ""),
    ("a/../../evil", tarfile.REGTYPE, ""),
    ("ln", tarfile.SYMTYPE, "/etc/passwd"),
    ("ln", tarfile.SYMTYPE, "../../out"),
    ("hl", tarfile.LNKTYPE, "../outside"),
])
def test_safe_extract_refuses(tmp_path: Any, name: str, kind: bytes, link: str) -> None:
    m = tarfile.TarInfo(name)
    m.type = kind
    m.linkname = link
    m.size = 1 if kind == tarfile.REGTYPE else 0
    with pytest.raises(dsec.InvalidArgumentError):
        _tar.safe_extract(_mktar(m), tmp_path / "dest")
    assert os.listdir(tmp_path / "dest") == []


def test_safe_extract_ok(tmp_path: Any) -> None:
    d = tarfile.TarInfo("d")
    d.type = tarfile.DIRTYPE
    f = tarfile.TarInfo("d/f")
    f.size = 3
    ln = tarfile.TarInfo("d/ln")
    ln.type = tarfile.SYMTYPE
    ln.linkname = "f"
    _tar.safe_extract(_mktar(d, f, ln), tmp_path)
    assert (tmp_path / "d" / "f").read_bytes() == b"xxx"
    assert os.readlink(tmp_path / "d" / "ln") == "f"


# ---- retry policy against a stub server ------------------------------------------------


class Stub:
    """An HTTP server answering from a script: a list of (status, body) per path."""

    def __init__(self) -> None:
        self.script: Dict[str, List[Any]] = {}
        self.gates: Dict[str, threading.Event] = {}  # "METHOD /path" answers once its event is set
        self.seen: List[Any] = []
        stub = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                stub.seen.append((self.command, self.path, body))
                gate = stub.gates.get(f"{self.command} {self.path.split('?')[0]}")
                if gate is not None:
                    gate.wait(10)
                steps = stub.script.get(f"{self.command} {self.path.split('?')[0]}") or [(404, {"error": {
                    "code": "not_found", "message": "stub", "infrastructure": False, "retryable": False}})]
                status, doc = steps.pop(0) if len(steps) > 1 else steps[0]
                out = json.dumps(doc).encode() if doc is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_DELETE = do_PUT = _any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.addr = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()


@pytest.fixture
def stub() -> Iterator[Stub]:
    s = Stub()
    yield s
    s.httpd.shutdown()


EXHAUSTED = (429, {"error": {"code": "resource_exhausted", "message": "full", "infrastructure": True,
                             "retryable": True}})
INTERNAL = (500, {"error": {"code": "internal", "message": "boom", "infrastructure": True, "retryable": True}})
SANDBOX = {"id": "sb-1", "backend": "container", "image": "debian", "state": "running", "cpu": 1,
           "memory_bytes": 1, "disk_bytes": 1, "pids_max": 1, "created_at": "2026-01-02T03:04:05.123456789Z",
           "last_active_at": "2026-01-02T03:04:05Z"}


def _run(kind: str, stub: Stub, fn: Any) -> Any:
    if kind == "sync":
        return fn(dsec.Client(stub.addr, "t"))

    async def main() -> Any:
        c = dsec.AsyncClient(stub.addr, "t")
        r = fn(c)
        while asyncio.iscoroutine(r):
            r = await r
        return r

    return asyncio.run(main())


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_create_retried_with_same_request_id(kind: str, stub: Stub, monkeypatch: Any) -> None:
    monkeypatch.setattr(_core, "backoff", lambda *a, **k: 0.001)
    monkeypatch.setattr(dsec.client, "backoff", lambda *a, **k: 0.001)
    monkeypatch.setattr(dsec.aio, "backoff", lambda *a, **k: 0.001)
    stub.script["POST /v1/sandboxes"] = [EXHAUSTED, INTERNAL, (201, SANDBOX)]
    sb = _run(kind, stub, lambda c: c.create(memory="1m"))
    assert sb.id == "sb-1" and sb.info.created_at is not None
    rids = {json.loads(b)["request_id"] for m, p, b in stub.seen}
    assert len(stub.seen) == 3 and len(rids) == 1


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_create_reports_pull_progress(kind: str, stub: Stub) -> None:
    # The create answers only once the callback saw the pull's progress.
    progress = {"ref": "reg.example/app:1", "digest": "sha256:ab", "phase": "fetching", "fetched_bytes": 5,
                "total_bytes": 10, "layers": [{"digest": "sha256:cd", "phase": "fetching", "fetched_bytes": 5,
                                               "total_bytes": 10}]}
    stub.script["GET /v1/images:pulls"] = [(200, progress)]
    stub.script["POST /v1/sandboxes"] = [(201, SANDBOX)]
    stub.gates["POST /v1/sandboxes"] = seen = threading.Event()
    got: List[Dict[str, Any]] = []

    def on_progress(pr: Dict[str, Any]) -> None:
        got.append(pr)
        seen.set()

    sb = _run(kind, stub, lambda c: c.create(image="reg.example/app:1", on_progress=on_progress))
    assert sb.id == "sb-1"
    assert seen.is_set() and got[0]["fetched_bytes"] == 5 and got[0]["layers"][0]["phase"] == "fetching"
    pulls = [p for m, p, b in stub.seen if p.startswith("/v1/images:pulls")]
    assert pulls and all(p == "/v1/images:pulls?ref=reg.example%2Fapp%3A1" for p in pulls)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_exec_never_retried(kind: str, stub: Stub) -> None:
    stub.script["POST /v1/sandboxes/sb-1/exec"] = [INTERNAL, (200, {"exit_code": 0, "stdout": "", "stderr": "",
                                                                    "duration_ms": 1})]
    with pytest.raises(dsec.InfrastructureError) as ei:
        _run(kind, stub, lambda c: c.sandbox("sb-1").exec("true"))
    assert ei.value.retryable and len(stub.seen) == 1


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_get_retried_then_gives_up(kind: str, stub: Stub, monkeypatch: Any) -> None:
    monkeypatch.setattr(dsec.client, "backoff", lambda *a, **k: 0.001)
    monkeypatch.setattr(dsec.aio, "backoff", lambda *a, **k: 0.001)
    stub.script["GET /v1/sandboxes/sb-1"] = [INTERNAL]
    with pytest.raises(dsec.InfrastructureError):
        _run(kind, stub, lambda c: c.get("sb-1"))
    assert len(stub.seen) == 1 + dsec.Client().retries


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_delete_retry_gone_is_success(kind: str, stub: Stub, monkeypatch: Any) -> None:
    monkeypatch.setattr(dsec.client, "backoff", lambda *a, **k: 0.001)
    monkeypatch.setattr(dsec.aio, "backoff", lambda *a, **k: 0.001)
    stub.script["DELETE /v1/sandboxes/sb-1"] = [INTERNAL, (404, {"error": {"code": "not_found", "message": "x"}})]
    _run(kind, stub, lambda c: c.sandbox("sb-1").delete())
    assert len(stub.seen) == 2


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_create_many_backpressure(kind: str, stub: Stub, monkeypatch: Any) -> None:
    monkeypatch.setattr(dsec.client, "backoff", lambda *a, **k: 0.001)
    monkeypatch.setattr(dsec.aio, "backoff", lambda *a, **k: 0.001)
    stub.script["POST /v1/sandboxes"] = [EXHAUSTED] * 10 + [(201, SANDBOX)]
    stub.script["POST /v1/sandboxes:batch"] = [NO_ROUTE]  # an older server: one by one
    sbs = _run(kind, stub, lambda c: c.create_many(3, concurrency=2))
    assert len(sbs) == 3 and len(stub.seen) == 14


NO_ROUTE = (404, {"error": {"code": "not_found", "message": "no route for POST /v1/sandboxes:batch"}})


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_create_many_uses_batch(kind: str, stub: Stub, monkeypatch: Any) -> None:
    """One batch request, retried whole with the same request ids under backpressure;
    a batch that fails for good is one CreateManyError naming the first failure."""
    monkeypatch.setattr(dsec.client, "backoff", lambda *a, **k: 0.001)
    monkeypatch.setattr(dsec.aio, "backoff", lambda *a, **k: 0.001)
    stub.script["POST /v1/sandboxes:batch"] = [EXHAUSTED, EXHAUSTED, (201, {"sandboxes": [SANDBOX] * 3})]
    sbs = _run(kind, stub, lambda c: c.create_many(3, request_id="rid", labels={"a": "b"}))
    assert len(sbs) == 3 and len(stub.seen) == 3
    bodies = [json.loads(b) for _, _, b in stub.seen]
    assert bodies[0] == bodies[2] and [s["request_id"] for s in bodies[0]["sandboxes"]] == ["rid-0", "rid-1", "rid-2"]
    assert all(s["labels"] == {"a": "b"} for s in bodies[0]["sandboxes"])
    stub.seen.clear()
    stub.script["POST /v1/sandboxes:batch"] = [(400, {"error": {"code": "invalid_argument",
                                                            "message": "sandboxes[2]: request_id too long"}})]
    with pytest.raises(dsec.CreateManyError) as ei:
        _run(kind, stub, lambda c: c.create_many(3))
    assert [i for i, _ in ei.value.failures] == [2] and isinstance(ei.value.failures[0][1], dsec.InvalidArgumentError)
    assert len(stub.seen) == 1


def test_trajectory_sandbox_lost_mapping() -> None:
    body = json.dumps({"error": {"code": "trajectory_sandbox_lost", "message": "gone",
                                 "infrastructure": True, "retryable": False}}).encode()
    e = error_from_response(410, body)
    assert isinstance(e, dsec.TrajectorySandboxLostError) and isinstance(e, dsec.InfrastructureError)
    assert e.infrastructure and not e.retryable
    e = error_from_response(410, b"")
    assert isinstance(e, dsec.TrajectorySandboxLostError) and not e.retryable


def test_quota_exceeded_mapping() -> None:
    body = json.dumps({"error": {"code": "quota_exceeded", "infrastructure": False, "retryable": False,
                                 "message": 'project "a" is at its max_sandboxes quota'}}).encode()
    e = error_from_response(429, body)
    assert isinstance(e, dsec.QuotaExceededError) and not isinstance(e, dsec.InfrastructureError)
    assert e.status == 429 and e.code == "quota_exceeded" and not e.retryable and "max_sandboxes" in str(e)
    # A plain 429 without a body stays resource_exhausted (the cluster is full: retry).
    assert isinstance(error_from_response(429, b""), dsec.InfrastructureError)
    e = error_from_response(403, json.dumps({"error": {"code": "permission_denied"}}).encode())
    assert isinstance(e, dsec.PermissionDeniedError) and isinstance(e, dsec.AuthError)


def test_step_counter() -> None:
    c = _core.StepCounter("t-1")
    n, h = c.begin()
    assert n == 1 and h == {"X-Dsec-Trajectory": "t-1", "X-Dsec-Step": "1"}
    c.end(n, None, replayed=True)
    assert c.next == 2 and c.replayed_steps == 1
    for code, advances in [("outcome_unknown", True), ("not_found", True), ("bad_gateway", True),
                           ("trajectory_diverged", False), ("conflict", False), ("unavailable", False),
                           ("trajectory_sandbox_lost", False)]:
        n, _ = c.begin()
        c.end(n, error_from_response(409, json.dumps({"error": {"code": code}}).encode()))
        assert (c.next == n + 1) == advances, code
    n, _ = c.begin()
    c.end(n, dsec.InfrastructureError("net", status=0))
    assert c.next == n
    with pytest.raises(dsec.InvalidArgumentError):
        _core.StepCounter("bad id")


def test_fncall_body() -> None:
    b = _core.fncall_body("python", "print(1)", tests=[("1\n", "2\n"), {"stdin": "x", "compare": "exact"}],
                          limits={"memory": "128m", "cpu_time_ms": 500})
    assert b == {"language": "python3", "files": {"main.py": "print(1)"},
                 "tests": [{"stdin": "1\n", "expected_output": "2\n"}, {"stdin": "x", "compare": {"mode": "exact"}}],
                 "limits": {"memory_bytes": 128 << 20, "cpu_time_ms": 500}}
    assert _core.fncall_body(cmd="echo hi")["cmd"] == ["/bin/sh", "-c", "echo hi"]
    assert _core.fncall_body("c", "int main(){}")["tests"] == [{}]
    with pytest.raises(dsec.InvalidArgumentError):
        _core.fncall_body()
    r = dsec.FnCallResult.from_json({"index": 3, "verdict": "", "tests": [],
                                     "error": {"code": "invalid_argument", "message": "bad"}})
    assert r.index == 3 and isinstance(r.error, dsec.InvalidArgumentError)


def test_network_body() -> None:
    assert _core.network_body(["10.1.2.0/24:443"], "pypi") == {"allow": ["10.1.2.0/24:443"], "rules": ["pypi"]}
    assert _core.network_body() == {}
    b = _core.create_body("container", None, None, None, None, None, None, None, None, "r1",
                          network={"allow": "10.0.0.1:53"})
    assert b["network"] == {"allow": ["10.0.0.1:53"]}
    assert "network" not in _core.create_body("container", None, None, None, None, None, None, None, None, "r1")
    with pytest.raises(TypeError):
        _core.network_body([443])
    info = dsec.SandboxInfo.from_json({"id": "sb", "network": {"allow": ["10.0.0.1"], "address": "10.203.0.1", "denied": 3}})
    assert info.network is not None and info.network.denied == 3 and info.network.allow == ["10.0.0.1"]
    assert dsec.SandboxInfo.from_json({"id": "sb"}).network is None


def test_input_body():
    from dsec import _core

    assert _core.input_body(text="echo hi\n") == {"text": "echo hi\n"}
    assert _core.input_body(key="ctrl-c") == {"key": "ctrl-c"}
    assert _core.input_body(click=(3, 4)) == {"click": {"x": 3, "y": 4, "button": "left"}}
    for bad in ({}, {"text": "a", "key": "b"}):
        try:
            _core.input_body(**bad)
        except ValueError:
            continue
        raise AssertionError(f"input_body({bad}) accepted")


# ---- one source for both clients -------------------------------------------------------


def test_sync_client_is_generated() -> None:
    """dsec/client.py is what gen_sync.py makes of dsec/aio.py (edit aio.py, then
    run python3 gen_sync.py in sdk/python)."""
    import gen_sync

    with open(gen_sync.SOURCE, encoding="utf-8") as f:
        want = gen_sync.generate(f.read())
    with open(gen_sync.TARGET, encoding="utf-8") as f:
        have = f.read()
    assert have == want, "dsec/client.py is stale: run python3 gen_sync.py in sdk/python"
    assert gen_sync.main(["--check"]) == 0


PAIRS = [(dsec.Client, dsec.AsyncClient), (dsec.Sandbox, dsec.AsyncSandbox), (dsec.Files, dsec.AsyncFiles),
         (dsec.Process, dsec.AsyncProcess), (dsec.ExecStream, dsec.AsyncExecStream),
         (dsec.Trajectory, dsec.AsyncTrajectory)]
ASYNC_ONLY = {"aclose": "close", "__aenter__": "__enter__", "__aexit__": "__exit__", "__aiter__": "__iter__"}


@pytest.mark.parametrize("sync,asy", PAIRS, ids=[s.__name__ for s, _ in PAIRS])
def test_sync_and_async_api_match(sync: type, asy: type) -> None:
    """Every public call of the sync client has its async twin with the same
    arguments; the async one's calls that do I/O are coroutines (or async
    generators), the sync one's are not."""
    import inspect

    def calls(cls: type) -> Dict[str, Any]:
        return {n: v for n, v in vars(cls).items() if (not n.startswith("_") or n in ASYNC_ONLY.values()
                                                       or n in ASYNC_ONLY) and callable(v)}

    s, a = calls(sync), {ASYNC_ONLY.get(n, n): v for n, v in calls(asy).items()}
    assert set(s) == set(a)
    for n in s:
        assert list(inspect.signature(s[n]).parameters) == list(inspect.signature(a[n]).parameters), n
        assert not inspect.iscoroutinefunction(s[n]) and not inspect.isasyncgenfunction(s[n]), n
        if inspect.iscoroutinefunction(a[n]) or inspect.isasyncgenfunction(a[n]):
            continue
        # Plain on both sides: handles and views that do no I/O.
        assert n in {"sandbox", "trajectory", "exec_stream", "__aiter__", "__iter__"}, n


def test_server_failure() -> None:
    """The session's server check (conftest) fails on a race report, an exit on its
    own, or a non-zero exit after SIGTERM, and only then."""
    from conftest import RACE_REPORT, server_failure

    assert server_failure("level=WARN msg=ok\n", None, 0) == ""
    why = server_failure("x\n==================\n" + RACE_REPORT + "\nRead at 0x00c0001 by goroutine 7:\n", None, 0)
    assert "data race" in why and "goroutine 7" in why
    assert "status 66" in server_failure("boom", 66, 66)
    assert "status 2 after SIGTERM" in server_failure("boom", None, 2)
    assert "did not exit" in server_failure("", None, None)


def test_late_error_from_keepalive_body():
    """A blocking call's answer that started early (x-dsec-keepalive) carries
    either the result or {"error": {...}, "status": N}: only the latter is an
    error, raised with its status; an exec result's own "error" text is not."""
    from dsec.errors import late_error

    err = late_error(b'  {"error": {"code": "sandbox_gone", "message": "gone", "infrastructure": true, "retryable": false}, "status": 410}\n')
    assert err is not None and err.code == "sandbox_gone" and err.status == 410
    assert late_error(b'   {"exit_code": 1, "stdout": "", "stderr": "", "duration_ms": 1, "error": "exec failed"}') is None
    assert late_error(b"") is None


def test_create_body_start() -> None:
    b = _core.create_body("container", None, None, None, None, None, None, None, None, "r",
                          start_cmd="python3 -m http.server 8080", ready_port=8080, ready_timeout=timedelta(seconds=30),
                          ready_cmd="true")
    assert (b["start_cmd"], b["ready_port"], b["ready_timeout_ms"], b["ready_cmd"]) == (
        "python3 -m http.server 8080", 8080, 30000, "true")
    assert "entrypoint" not in b
    plain = _core.create_body("container", None, None, None, None, None, None, None, None, "r")
    assert not {"start_cmd", "entrypoint", "ready_cmd", "ready_port", "ready_timeout_ms"} & set(plain)
    b = _core.create_body("container", None, None, None, None, None, None, None, None, "r",
                          entrypoint=True, ready_port=0, ready_timeout=0)
    # Zero port and timeout are sent as out of range: the server names the field.
    assert (b["entrypoint"], b["ready_port"], b["ready_timeout_ms"]) == (True, -1, -1)
    info = dsec.SandboxInfo.from_json({"id": "sb-1", "start": {"state": "failed", "process_id": "p1",
                                                             "cmd": ["/bin/sh", "-c", "exit 1"], "error": "exit code 1"}})
    assert info.start == dsec.StartStatus(state="failed", process_id="p1", cmd=["/bin/sh", "-c", "exit 1"],
                                          error="exit code 1")
    assert dsec.SandboxInfo.from_json({"id": "sb-2"}).start is None
    assert "wait" not in plain
    assert _core.create_body("container", "python:3.12", None, None, None, None, None, None, None, "r",
                             wait=False)["wait"] is False
    pulling = dsec.SandboxInfo.from_json({"id": "sb-3", "state": "pulling",
                                          "pull": {"phase": "fetching", "fetched_bytes": 1, "total_bytes": 4}})
    assert (pulling.state, pulling.pull["total_bytes"], pulling.error) == ("pulling", 4, None)
    failed = dsec.SandboxInfo.from_json({"id": "sb-4", "state": "failed", "error": {"code": "not_found", "message": "m"}})
    assert (failed.state, failed.error["code"], failed.pull) == ("failed", "not_found", None)

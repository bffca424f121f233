"""The synchronous client: :class:`Client`, :class:`Sandbox`, :class:`Files`,
:class:`Process`, :class:`ExecStream`."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import (
    Any,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Tuple,
    Union,
)

from . import _core
from ._core import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    Cmd,
    Req,
    Seconds,
    Size,
    backoff,
    create_body,
    decode_json,
    exec_body,
    exec_http_timeout,
    files_req,
    http_proxy_path,
    process_path,
    sandbox_path,
    should_retry,
)
from ._sync_http import Conn, Pool, base_headers, roundtrip, set_timeout
from ._tar import PathLike, make_tar, safe_extract
from .errors import (
    CreateManyError,
    DsecError,
    InfrastructureError,
    NotFoundError,
    error_from_response,
    network_error,
)
from .types import (
    ExecResult,
    FileInfo,
    HTTPResponse,
    ProcessInfo,
    SandboxInfo,
    StreamChunk,
)

__all__ = ["Client", "Sandbox", "Files", "Process", "ExecStream"]

Stdin = Union[None, str, bytes, Iterable[bytes]]


class Client:
    """A client of one dsec server. Thread-safe; create one and share it.

    ``addr`` defaults to $DSEC_ADDR or http://127.0.0.1:7070; ``token`` to $DSEC_TOKEN
    or the file $DSEC_DATA_DIR/token (DSEC_DATA_DIR defaults to /var/lib/dsec).
    ``timeout`` is the socket timeout of one request in seconds (None: none; blocking
    exec and process waits extend it by the command's own timeout). ``retries`` is how
    many times a *safe* request (GETs, create -- which always carries a request id --
    and delete) is repeated on a retryable error, with exponential backoff and jitter.
    Exec, file writes, signals, pause/resume/reset are never repeated.
    """

    def __init__(
        self,
        addr: Optional[str] = None,
        token: Optional[str] = None,
        timeout: Optional[float] = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        pool_size: int = 64,
    ) -> None:
        self.addr, host, port, self._prefix = _core.resolve_addr(addr)
        self.token = _core.resolve_token(token)
        self.timeout = timeout
        self.retries = max(0, int(retries))
        self._pool = Pool(host, port, timeout, maxsize=pool_size)
        self._headers = base_headers(self.token)

    # ---- plumbing ----------------------------------------------------------------

    def close(self) -> None:
        """Close idle connections (the client stays usable)."""
        self._pool.close()
        self._pool.reopen()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.addr!r})"

    def _send(self, req: Req, raw: bool = False, retries: Optional[int] = None) -> Tuple[int, Dict[str, str], bytes]:
        """Perform req, retrying when it is safe; non-2xx become exceptions (unless
        raw, used by the HTTP proxy)."""
        n = self.retries if retries is None else retries
        attempt = 0
        while True:
            try:
                status, headers, body = roundtrip(self._pool, req, self._headers, self._prefix)
                if status >= 300 and not raw:
                    raise error_from_response(status, body)
                return status, headers, body
            except DsecError as e:
                if req.gone_ok and attempt > 0 and isinstance(e, NotFoundError):
                    return 204, {}, b""
                if not should_retry(req, e, attempt, n):
                    raise
            time.sleep(backoff(attempt))
            attempt += 1

    def _json(self, req: Req) -> Any:
        return decode_json(self._send(req)[2])

    # ---- node --------------------------------------------------------------------

    def health(self) -> bool:
        """True when the server answers GET /v1/health."""
        doc = self._json(Req("GET", "/v1/health", retry=True))
        return bool(doc and doc.get("ok"))

    def info(self) -> Dict[str, Any]:
        """Node information: version, node, backends, images, cgroup."""
        return dict(self._json(Req("GET", "/v1/info", retry=True)) or {})

    # ---- sandboxes ----------------------------------------------------------------

    def create(
        self,
        backend: str = "container",
        image: Optional[str] = None,
        cpu: Optional[float] = None,
        memory: Optional[Size] = None,
        disk: Optional[Size] = None,
        ttl: Optional[Seconds] = None,
        idle_timeout: Optional[Seconds] = None,
        env: Optional[Mapping[str, str]] = None,
        labels: Optional[Mapping[str, str]] = None,
        request_id: Optional[str] = None,
        pids_max: Optional[int] = None,
    ) -> "Sandbox":
        """Create a sandbox and return it once it runs. memory/disk take bytes or
        strings like "512m"; ttl/idle_timeout take seconds or a timedelta. A request
        id (random unless given) makes the call idempotent, so it is retried."""
        body = create_body(backend, image, cpu, memory, disk, ttl, idle_timeout, env, labels, request_id, pids_max)
        return self._create(body, None)

    def _create(self, body: Dict[str, Any], retries: Optional[int]) -> "Sandbox":
        doc = decode_json(self._send(Req("POST", "/v1/sandboxes", json_body=body, retry=True), retries=retries)[2])
        return Sandbox(self, SandboxInfo.from_json(doc))

    def create_many(
        self,
        n: int,
        concurrency: int = 32,
        timeout: Optional[float] = 600.0,
        **kw: Any,
    ) -> List["Sandbox"]:
        """Create n sandboxes with at most ``concurrency`` requests in flight and
        return them (in order) once all run.

        Backpressure: a retryable error (429 resource_exhausted, 503, network) is
        retried with backoff and the *same* request id until ``timeout`` seconds
        have passed, so no sandbox is created twice. All or nothing: if any sandbox
        fails for good, the ones created are deleted and :class:`CreateManyError`
        lists the failures. ``kw`` are :meth:`create`'s arguments; a ``request_id``
        there is used as a prefix ("ID-0", "ID-1", ...) so a repeated create_many
        returns the same sandboxes.
        """
        if n <= 0:
            return []
        prefix = kw.pop("request_id", None) or _core.new_request_id()
        bodies = [
            create_body(
                kw.get("backend", "container"), kw.get("image"), kw.get("cpu"), kw.get("memory"),
                kw.get("disk"), kw.get("ttl"), kw.get("idle_timeout"), kw.get("env"), kw.get("labels"),
                f"{prefix}-{i}", kw.get("pids_max"),
            )
            for i in range(n)
        ]
        unknown = set(kw) - {"backend", "image", "cpu", "memory", "disk", "ttl", "idle_timeout", "env", "labels", "pids_max"}
        if unknown:
            raise TypeError(f"create_many: unexpected arguments {sorted(unknown)}")
        deadline = None if timeout is None else time.monotonic() + timeout
        results: List[Optional[Sandbox]] = [None] * n
        failures: List[Tuple[int, BaseException]] = []
        lock = threading.Lock()

        def one(i: int) -> None:
            attempt = 0
            while True:
                try:
                    results[i] = self._create(bodies[i], 0)
                    return
                except DsecError as e:
                    if not e.retryable or (deadline is not None and time.monotonic() >= deadline):
                        with lock:
                            failures.append((i, e))
                        return
                except BaseException as e:  # noqa: BLE001 - reported with the others
                    with lock:
                        failures.append((i, e))
                    return
                time.sleep(backoff(attempt, 0.05, 2.0))
                attempt += 1

        with ThreadPoolExecutor(max_workers=max(1, min(concurrency, n))) as ex:
            list(ex.map(one, range(n)))
        made = [s for s in results if s is not None]
        if failures:
            failures.sort(key=lambda f: f[0])
            bad = _delete_all(made, concurrency)
            raise CreateManyError(failures, n, deleted=len(made) - len(bad), cleanup_failures=bad)
        return made  # type: ignore[return-value]

    def get(self, sandbox_id: str) -> "Sandbox":
        """The sandbox with this id (NotFoundError if none)."""
        doc = self._json(Req("GET", sandbox_path(sandbox_id), retry=True))
        return Sandbox(self, SandboxInfo.from_json(doc))

    def sandbox(self, sandbox_id: str) -> "Sandbox":
        """A handle on an existing sandbox without asking the server."""
        return Sandbox(self, SandboxInfo(id=sandbox_id))

    def list(self) -> List["Sandbox"]:
        """Every sandbox of the node."""
        doc = self._json(Req("GET", "/v1/sandboxes", retry=True))
        return [Sandbox(self, SandboxInfo.from_json(d)) for d in _core.sandboxes_from_list(doc)]

    def delete_all(self, concurrency: int = 32) -> int:
        """Delete every sandbox of the node; returns how many were deleted."""
        sbs = self.list()
        bad = _delete_all(sbs, concurrency)
        return len(sbs) - len(bad)


def _delete_all(sbs: List["Sandbox"], concurrency: int) -> List[str]:
    """Delete sandboxes in parallel; returns the ids that could not be deleted."""
    bad: List[str] = []

    def rm(sb: "Sandbox") -> None:
        try:
            sb.delete()
        except NotFoundError:
            pass
        except Exception:  # noqa: BLE001
            bad.append(sb.id)

    if sbs:
        with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(sbs)))) as ex:
            list(ex.map(rm, sbs))
    return bad


class Sandbox:
    """One sandbox. A context manager: leaving the block deletes it."""

    def __init__(self, client: Client, info: SandboxInfo) -> None:
        self.client = client
        self.info = info
        self.id = info.id
        self.files = Files(self)

    def __repr__(self) -> str:
        return f"Sandbox({self.id!r}, state={self.info.state!r})"

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.delete()
        except NotFoundError:
            pass

    @property
    def state(self) -> str:
        return self.info.state

    def _send(self, req: Req, raw: bool = False) -> Tuple[int, Dict[str, str], bytes]:
        return self.client._send(req, raw)

    def _json(self, req: Req) -> Any:
        return decode_json(self._send(req)[2])

    def _update(self, doc: Any) -> "Sandbox":
        if doc:
            self.info = SandboxInfo.from_json(doc)
        return self

    # ---- lifecycle -------------------------------------------------------------------

    def refresh(self) -> "Sandbox":
        """Re-read the sandbox's description (``.info``)."""
        return self._update(self._json(Req("GET", sandbox_path(self.id), retry=True)))

    def pause(self) -> "Sandbox":
        return self._update(self._json(Req("POST", sandbox_path(self.id, "/pause"))))

    def resume(self) -> "Sandbox":
        return self._update(self._json(Req("POST", sandbox_path(self.id, "/resume"))))

    def reset(self) -> "Sandbox":
        """A fresh writable layer; every process is killed."""
        return self._update(self._json(Req("POST", sandbox_path(self.id, "/reset"))))

    def delete(self) -> None:
        """Delete the sandbox. Retried on retryable errors; a not_found answer to a
        *retry* counts as success (the first attempt did it). NotFoundError on the
        first attempt is raised."""
        self._send(Req("DELETE", sandbox_path(self.id), retry=True, gone_ok=True))

    # ---- exec ------------------------------------------------------------------------

    def exec(
        self,
        cmd: Cmd,
        timeout: Optional[Seconds] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        stdin: Union[None, str, bytes] = None,
        max_output: Optional[Size] = None,
    ) -> ExecResult:
        """Run a command to completion. A str runs with /bin/sh -c; a list is the
        argv. A non-zero exit, a timeout (``timed_out``) or an OOM kill are in the
        result, not exceptions. Never retried."""
        body = exec_body(cmd, timeout, env, cwd, user, stdin, max_output)
        req = Req("POST", sandbox_path(self.id, "/exec"), json_body=body,
                  timeout=exec_http_timeout(self.client.timeout, timeout))
        return ExecResult.from_json(self._json(req))

    def exec_stream(
        self,
        cmd: Cmd,
        timeout: Optional[Seconds] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        stdin: Stdin = None,
    ) -> "ExecStream":
        """Run a command with live output. Iterate the returned :class:`ExecStream`:
        it yields :class:`StreamChunk` ``(stream, data)`` items as output arrives
        and finally the :class:`ExecResult` (whose stdout/stderr are empty: they
        were streamed). ``stdin`` (bytes, str or an iterable of bytes) is sent while
        the output is read; ``ExecStream.signal("SIGTERM")`` signals the process."""
        body = exec_body(cmd, timeout, env, cwd, user, None)
        return ExecStream(self.client, self.id, body, stdin)

    # ---- background processes ----------------------------------------------------

    def spawn(
        self,
        cmd: Cmd,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        stdin: Union[None, str, bytes] = None,
        timeout: Optional[Seconds] = None,
    ) -> "Process":
        """Start a background process (it survives a server restart)."""
        body = exec_body(cmd, timeout, env, cwd, user, stdin)
        doc = self._json(Req("POST", sandbox_path(self.id, "/processes"), json_body=body))
        return Process(self, ProcessInfo.from_json(doc))

    def processes(self) -> List["Process"]:
        doc = self._json(Req("GET", sandbox_path(self.id, "/processes"), retry=True))
        return [Process(self, ProcessInfo.from_json(d)) for d in (doc or {}).get("processes") or []]

    def process(self, process_id: str) -> "Process":
        doc = self._json(Req("GET", process_path(self.id, process_id), retry=True))
        return Process(self, ProcessInfo.from_json(doc))

    # ---- HTTP into the sandbox -------------------------------------------------------

    def http(
        self,
        port: int,
        method: str = "GET",
        path: str = "/",
        body: Union[None, bytes, str] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> HTTPResponse:
        """Send an HTTP request to ``port`` inside the sandbox through the server's
        proxy; ``path`` may carry a query. The application's answer is returned
        whatever its status; dsec's own errors (no such sandbox, nothing listening:
        BadGatewayError) are raised. Never retried."""
        if isinstance(body, str):
            body = body.encode()
        req = Req(method.upper(), http_proxy_path(self.id, port, path), body=body, headers=headers,
                  timeout=timeout if timeout is not None else _core._UNSET)
        status, h, data = self._send(req, raw=True)
        if status >= 300 and "x-dsec-error" in h:
            raise error_from_response(status, data)
        return HTTPResponse(status, h, data)


class Files:
    """``sandbox.files``: every path is resolved inside the sandbox's root."""

    def __init__(self, sb: Sandbox) -> None:
        self._sb = sb

    def read(self, path: str) -> bytes:
        return self._sb._send(files_req("GET", self._sb.id, "", path))[2]

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def write(self, path: str, data: Union[bytes, str], mode: int = 0o644) -> FileInfo:
        """Create or replace a file (parents must exist; see :meth:`mkdir`)."""
        if isinstance(data, str):
            data = data.encode()
        req = files_req("PUT", self._sb.id, "", path, query={"mode": f"{mode:04o}"},
                        body=bytes(data), ctype="application/octet-stream")
        return FileInfo.from_json(decode_json(self._sb._send(req)[2]))

    def list(self, path: str) -> List[FileInfo]:
        doc = decode_json(self._sb._send(files_req("GET", self._sb.id, "/list", path))[2])
        return [FileInfo.from_json(d) for d in (doc or {}).get("files") or []]

    def stat(self, path: str) -> FileInfo:
        """Describe path (a final symlink is not followed)."""
        return FileInfo.from_json(decode_json(self._sb._send(files_req("GET", self._sb.id, "/stat", path))[2]))

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except NotFoundError:
            return False

    def mkdir(self, path: str, parents: bool = True, mode: Optional[int] = None) -> None:
        body: Dict[str, Any] = {"path": path, "parents": parents}
        if mode:
            body["mode"] = mode
        self._sb._send(Req("POST", sandbox_path(self._sb.id, "/files/mkdir"), json_body=body))

    def remove(self, path: str, recursive: bool = False) -> None:
        q = {"recursive": "true"} if recursive else None
        self._sb._send(files_req("DELETE", self._sb.id, "", path, query=q))

    def upload(self, local: PathLike, remote_dir: str) -> None:
        """Upload a local directory's *contents* into remote_dir (created if
        missing), or a single file as remote_dir/<its name>, as one tar."""
        data = make_tar(local)
        self.upload_tar(data, remote_dir)

    def upload_tar(self, data: bytes, remote_dir: str) -> None:
        """Extract a tar (plain or gzip) into remote_dir."""
        req = files_req("PUT", self._sb.id, "/archive", remote_dir, body=data, ctype="application/x-tar")
        self._sb._send(req)

    def download_tar(self, remote_path: str) -> bytes:
        """remote_path (file or tree) as an uncompressed tar; entry names start with
        its base name."""
        return self._sb._send(files_req("GET", self._sb.id, "/archive", remote_path))[2]

    def download(self, remote_path: str, local_dir: PathLike) -> None:
        """Download remote_path (a file or a tree) into local_dir: "/work" becomes
        local_dir/work. Extraction is safe: absolute names, ".." escapes, links
        pointing outside local_dir and device files are refused."""
        safe_extract(self.download_tar(remote_path), local_dir)


class Process:
    """A background process started with :meth:`Sandbox.spawn`."""

    def __init__(self, sb: Sandbox, info: ProcessInfo) -> None:
        self.sandbox = sb
        self.info = info
        self.id = info.id
        self.pid = info.pid

    def __repr__(self) -> str:
        return f"Process({self.id!r}, pid={self.pid}, running={self.info.running})"

    @property
    def running(self) -> bool:
        return self.info.running

    @property
    def result(self) -> Optional[ExecResult]:
        return self.info.result

    def refresh(self) -> "Process":
        doc = self.sandbox._json(Req("GET", process_path(self.sandbox.id, self.id), retry=True))
        self.info = ProcessInfo.from_json(doc)
        return self

    def wait(self, timeout: Optional[Seconds] = None) -> ExecResult:
        """Wait for the process to exit and return how it ended; raises the builtin
        TimeoutError if it still runs after ``timeout`` seconds."""
        t = _core.seconds(timeout)
        q = {"timeout_ms": str(max(1, int(t * 1000)))} if t is not None else None
        http_t = None if t is None or self.sandbox.client.timeout is None else self.sandbox.client.timeout + t
        req = Req("POST", process_path(self.sandbox.id, self.id, "/wait"), query=q, timeout=http_t)
        self.info = ProcessInfo.from_json(self.sandbox._json(req))
        if self.info.running or self.info.result is None:
            raise TimeoutError(f"process {self.id} still running after {t}s")
        return self.info.result

    def kill(self, signal: Union[str, int] = "SIGKILL") -> None:
        """Signal the process's group ("SIGTERM", "TERM", 15, ...)."""
        self.sandbox._send(Req("POST", process_path(self.sandbox.id, self.id, "/kill"),
                               json_body={"signal": str(signal)}))

    def logs(self, stream: str = "stdout", offset: int = 0) -> bytes:
        """The process's output so far ("stdout" or "stderr"), from byte offset."""
        req = Req("GET", process_path(self.sandbox.id, self.id, "/logs"),
                  query={"stream": stream, "offset": str(offset)}, retry=True)
        return self.sandbox._send(req)[2]


class ExecStream:
    """A running streaming exec (POST .../exec/stream, full-duplex NDJSON).

    Iterating yields :class:`StreamChunk` items in the order the server sent them,
    then the final :class:`ExecResult` (also kept in ``.result``). The request body
    is sent with chunked encoding: the request line and small stdin go out before the
    first read; large or iterable stdin is written by a helper thread while the
    output is read, so a process that writes before it reads cannot deadlock. Leaving
    the iteration early closes the connection, which kills the process.
    """

    def __init__(self, client: Client, sid: str, body: Dict[str, Any], stdin: Stdin) -> None:
        self.result: Optional[ExecResult] = None
        self.pid: Optional[int] = None
        self._client = client
        self._wlock = threading.Lock()
        self._writer_done = threading.Event()
        self._stop = threading.Event()
        self._finished = False
        conn, _ = client._pool.get()
        self._conn: Optional[Conn] = conn
        first = json.dumps(body, separators=(",", ":")).encode() + b"\n"
        small = stdin is None or (isinstance(stdin, (bytes, str)) and len(stdin) <= (64 << 10))
        try:
            set_timeout(conn, None, None)
            conn.putrequest("POST", client._prefix + sandbox_path(sid, "/exec/stream"), skip_accept_encoding=True)
            for k, v in client._headers.items():
                conn.putheader(k, v)
            conn.putheader("Content-Type", "application/x-ndjson")
            conn.putheader("Transfer-Encoding", "chunked")
            if small:
                payload = first + b"".join(_core.stream_input_lines(stdin))
                conn.endheaders(_chunk(payload))
                self._writer_done.set()
            else:
                conn.endheaders(_chunk(first))
                threading.Thread(target=self._feed, args=(stdin,), daemon=True).start()
            if client.timeout is not None and conn.sock is not None:
                conn.sock.settimeout(None)  # output may pause for as long as the command likes
            self._resp = conn.getresponse()
        except (OSError, Exception) as e:
            self._abort()
            if isinstance(e, DsecError):
                raise
            raise network_error(e) from e
        if self._resp.status != 200:
            data = self._resp.read()
            self._abort()
            raise error_from_response(self._resp.status, data)

    def _feed(self, stdin: Stdin) -> None:
        try:
            for line in _core.stream_input_lines(stdin):
                if self._stop.is_set():
                    return
                self._write(line)
            self._writer_done.set()
        except Exception:  # noqa: BLE001 - the reader sees the broken connection
            pass

    def _write(self, data: bytes) -> None:
        with self._wlock:
            conn = self._conn
            if conn is None or conn.sock is None:
                raise BrokenPipeError("exec stream closed")
            conn.sock.sendall(_chunk(data))

    def signal(self, sig: Union[str, int] = "SIGTERM") -> None:
        """Send a signal to the process group while it runs."""
        try:
            self._write(_core.signal_line(sig))
        except OSError as e:
            raise network_error(e, "exec stream: sending a signal failed") from e

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[Union[StreamChunk, ExecResult]]:
        try:
            while True:
                try:
                    line = self._resp.readline()
                except (OSError, Exception) as e:
                    raise InfrastructureError(
                        f"exec stream broke: {type(e).__name__}: {e}", retryable=False) from e
                if not line:
                    raise InfrastructureError("exec stream ended before the exit event", retryable=False)
                line = line.strip()
                if not line:
                    continue
                ev = json.loads(line)
                typ = ev.get("type")
                if typ in ("stdout", "stderr"):
                    yield StreamChunk(typ, _b64(ev.get("data")))
                elif typ == "started":
                    self.pid = ev.get("pid")
                elif typ == "exit":
                    self.result = ExecResult.from_json(ev.get("result") or {})
                    self._finish()
                    yield self.result
                    return
                elif typ == "error":
                    err = ev.get("error") or {}
                    raise error_from_response(200, json.dumps({"error": err}).encode())
        finally:
            self.close()

    def wait(self) -> ExecResult:
        """Consume the stream, discarding output, and return the result."""
        for _ in self:
            pass
        assert self.result is not None
        return self.result

    def _finish(self) -> None:
        """After the exit event: end the request body, drain the response and give
        the connection back if both sides ended cleanly."""
        if self._finished:
            return
        self._finished = True
        conn = self._conn
        if conn is None:
            return
        if not self._writer_done.is_set():
            self._abort()
            return
        try:
            with self._wlock:
                assert conn.sock is not None
                conn.sock.sendall(b"0\r\n\r\n")
            if self._client.timeout is not None:
                conn.sock.settimeout(self._client.timeout)
            self._resp.read()
        except (OSError, Exception):  # noqa: BLE001
            self._abort()
            return
        # Not pooled: when the process exits before reading all of stdin the server
        # leaves part of the request body unread, and reusing such a connection
        # breaks the next request (seen as a 500 "invalid concurrent Body.Read").
        self._conn = None
        conn.close()

    def _abort(self) -> None:
        self._stop.set()
        with self._wlock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Stop: if the process still runs, the closed connection kills it."""
        if self._conn is not None and not self._finished:
            self._abort()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _b64(s: Optional[str]) -> bytes:
    import base64

    return base64.b64decode(s) if s else b""

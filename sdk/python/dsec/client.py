"""The synchronous client: :class:`Client`, :class:`Sandbox`, :class:`Files`,
:class:`Process`, :class:`ExecStream`, :class:`Trajectory`.

GENERATED from aio.py by gen_sync.py: do not edit; edit aio.py and run
``python3 gen_sync.py`` in sdk/python (a test checks this file is up to date)."""

from __future__ import annotations

import base64
import json
import time
from typing import (
    Any,
    Iterator,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Tuple,
    Union,
)

from . import _sync_http as _io
from . import _core
from ._sync_http import Stdin
from ._core import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    REPLAYED_HEADER,
    Cmd,
    Req,
    Seconds,
    Size,
    StepCounter,
    backoff,
    code_body,
    code_context_path,
    code_event,
    RUN_PATH,
    RunEvents,
    run_request,
    create_body,
    decode_json,
    exec_body,
    exec_http_timeout,
    files_req,
    fncall_body,
    fncall_http_timeout,
    http_proxy_path,
    process_path,
    sandbox_path,
    should_retry,
    with_headers,
    with_tty,
)
from ._tar import PathLike, make_tar, safe_extract
from .errors import (
    CreateManyError,
    DsecError,
    InfrastructureError,
    InvalidArgumentError,
    NotFoundError,
    NotImplementedByBackendError,
    KEEPALIVE_HEADER,
    error_from_response,
    late_error,
    network_error,
)
from .types import (
    CodeContext,
    CodeError,
    CodeResult,
    ExecResult,
    RunResult,
    Execution,
    FileInfo,
    FnCallResult,
    HTTPResponse,
    ProcessInfo,
    RebuildResult,
    ReclaimResult,
    SandboxInfo,
    StreamChunk,
    TrajectoryInfo,
    TrajectoryStep,
)

__all__ = ["Client", "Sandbox", "Files", "Process", "ExecStream", "Trajectory"]

_CREATE_ARGS = {"backend", "image", "cpu", "memory", "disk", "ttl", "idle_timeout", "env", "labels", "pids_max",
                "user_namespace", "request_id", "network", "cpu_class", "ksm", "start_cmd", "entrypoint",
                "ready_cmd", "ready_port", "ready_timeout"}


class Client:
    """A client of one dsec server. Create one and share it (the sync client across
    threads; the asyncio client across tasks, with one keep-alive pool per event
    loop). ``close()`` / ``await aclose()`` (or leaving its ``with`` / ``async
    with`` block) closes its idle connections; the client stays usable.

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
        pool_size: int = _io.POOL_SIZE,
    ) -> None:
        self.addr, host, port, prefix = _core.resolve_addr(addr)
        self.token = _core.resolve_token(token)
        self.timeout = timeout
        self.retries = max(0, int(retries))
        self._http = _io.Transport(host, port, prefix, self.token, pool_size)
        self._batch: Optional[bool] = None  # whether the server has POST /v1/sandboxes:batch

    # ---- plumbing ----------------------------------------------------------------

    def close(self) -> None:
        """Close idle connections (the client stays usable)."""
        self._http.close_idle()

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
                status, headers, body = self._http.roundtrip(req, self.timeout)
                if status >= 300 and not raw:
                    raise error_from_response(status, body)
                if not raw and KEEPALIVE_HEADER in headers:
                    late = late_error(body)
                    if late is not None:
                        raise late
                return status, headers, body
            except DsecError as e:
                if req.gone_ok and attempt > 0 and isinstance(e, NotFoundError):
                    return 204, {}, b""
                if not should_retry(req, e, attempt, n):
                    raise
            _io.sleep(backoff(attempt))
            attempt += 1

    def _json(self, req: Req) -> Any:
        return decode_json((self._send(req))[2])

    # ---- node --------------------------------------------------------------------

    def health(self) -> bool:
        """True when the server answers GET /v1/health."""
        doc = self._json(Req("GET", "/v1/health", retry=True))
        return bool(doc and doc.get("ok"))

    def info(self) -> Dict[str, Any]:
        """Node information: version, node, backends, images, cgroup."""
        return dict(self._json(Req("GET", "/v1/info", retry=True)) or {})

    def images(self) -> List[Dict[str, Any]]:
        """Images and layered environments, with per-layer accounting."""
        return list(self._json(Req("GET", "/v1/images", retry=True)) or [])

    def image(self, name: str) -> Dict[str, Any]:
        """One image or environment: kind, layers (base first), size, bytes_fetched,
        config (env, working_dir, user, entrypoint, cmd kept from its OCI image)."""
        return dict(self._json(Req("GET", "/v1/images/" + _core.esc(name), retry=True)) or {})

    def pull_progress(self, ref: str) -> Optional[Dict[str, Any]]:
        """How far this node's pull of ref (a registry reference or an image
        digest) got: phase (resolving, fetching, converting, done), fetched_bytes
        of total_bytes, and the same per layer; None when no pull of ref is in
        flight (not started, already on the node, or ended)."""
        try:
            return dict(self._json(Req("GET", "/v1/images:pulls?ref=" + _core.esc(ref), retry=True)) or {})
        except NotFoundError:
            return None

    def pulls(self) -> List[Dict[str, Any]]:
        """This node's image pulls in flight (as pull_progress answers each)."""
        return list(self._json(Req("GET", "/v1/images:pulls", retry=True)) or [])

    def _watch_pull(self, ref: str, on_progress: Callable[[Dict[str, Any]], Any], stopped: Callable[[], bool]) -> None:
        """Call on_progress with the pull of ref's progress every 0.25 s until
        stopped() (a server that does not report pulls ends the watch)."""
        while not stopped():
            try:
                pr = self.pull_progress(ref)
            except NotImplementedByBackendError:
                return
            except DsecError:
                pr = None
            if pr is not None and not stopped():
                on_progress(pr)
            _io.sleep(0.25)

    def compose_image(self, name: str, base: str, toolkits: Optional[List[str]] = None,
                            workspace: Optional[str] = None) -> Dict[str, Any]:
        """Compose an environment from layers already in the node's blob store (by
        name or digest; ``dsec image build`` makes them). Returns it as image()."""
        body = {"name": name, "base": base, "toolkits": list(toolkits or []), "workspace": workspace or ""}
        return dict(self._json(Req("POST", "/v1/images", json_body=body)) or {})

    def delete_image(self, name: str) -> None:
        """Remove an environment, or an image pulled by registry reference (the
        reference or its digest) from the node's image cache (ConflictError while a
        sandbox uses it; the message names the sandboxes)."""
        self._send(Req("DELETE", "/v1/images/" + _core.esc(name)))

    def prune_images(self) -> Dict[str, Any]:
        """Remove every image pulled by reference that no sandbox uses from the node's
        image cache: {"removed": [image...], "in_use": [image...], "bytes": N}."""
        return dict(self._json(Req("POST", "/v1/images:prune")) or {})

    def record_image(self, name: str) -> List[Dict[str, Any]]:
        """Store what this node's sandboxes read from the environment's layers as
        their prefetch lists (ConflictError if nothing was read yet)."""
        return list(self._json(Req("POST", "/v1/images/" + _core.esc(name) + "/record")) or [])

    def build_image(self, context: Union[PathLike, bytes], name: str, dockerfile: Optional[str] = None,
                          build_args: Optional[Mapping[str, str]] = None, target: Optional[str] = None,
                          network: Optional[str] = None, run_timeout: Optional[Seconds] = None,
                          on_log: Optional[Callable[[str], Any]] = None) -> Dict[str, Any]:
        """Build an environment from a Dockerfile on the server (``POST
        /v1/images:build``, ``dsec image build``): ``context`` is a local directory
        (sent as a tar of its contents) or the context as tar bytes; ``dockerfile``
        its path in the context (default ``Dockerfile``); ``build_args`` the ARG
        values; ``target`` the last stage to build; ``network`` the RUN steps'
        egress policy (default ``none``); ``run_timeout`` bounds each RUN step.
        ``on_log`` is called with each line of the RUN steps' output as the build
        writes it. Returns the result: ``{"image": {...}, "steps": [...],
        "cache_hits": N, "layer_steps": N, "ms": ...}``. A Dockerfile mistake or a
        failing RUN raises InvalidArgumentError naming the line, an unknown base
        image NotFoundError. Not retried."""
        path = _core.build_path(name, dockerfile, target, build_args, network, run_timeout)
        data = context if isinstance(context, bytes) else _io.run_blocking(make_tar, context)
        for line in self._http.stream_lines("POST", path, data, "application/x-tar", self.timeout):
            typ, v = _core.build_event(line)
            if typ == "log" and on_log is not None:
                on_log(v)
            elif typ == "result":
                return dict(v)
        raise InfrastructureError("build: the answer ended without a result", code="unavailable", status=0)

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
        user_namespace: Optional[bool] = None,
        network: Optional[Mapping[str, Any]] = None,
        cpu_class: Optional[str] = None,
        ksm: bool = False,
        start_cmd: Optional[str] = None,
        entrypoint: bool = False,
        ready_cmd: Optional[str] = None,
        ready_port: Optional[int] = None,
        ready_timeout: Optional[Seconds] = None,
        on_progress: Optional[Callable[[Dict[str, Any]], Any]] = None,
        wait: bool = True,
        allow_setuid: bool = False,
    ) -> "Sandbox":
        """Create a sandbox and return it once it runs. memory/disk take bytes or
        strings like "512m"; ttl/idle_timeout take seconds or a timedelta. A request
        id (random unless given) makes the call idempotent, so it is retried.
        user_namespace True/False asks for a user namespace (sandbox root an
        unprivileged host uid) or against one; None takes the server's default.
        network opts into egress: {"allow": ["CIDR[:PORT[-PORT]]", ...], "rules":
        [rule set names], "allow_domains": ["pypi.org", "*.pythonhosted.org"],
        "deny_domains": [...]} (see set_network). allow_setuid=True lets setuid
        programs (sudo) work in a container sandbox, up to sandbox root.

        start_cmd (a shell command) or entrypoint=True (the image's Entrypoint
        and Cmd) is started in the background once the sandbox exists; with
        ready_cmd (must exit 0) and/or ready_port (must accept a connection)
        create returns only once it is ready, within ready_timeout (seconds or a
        timedelta; default 60 s). A start that fails raises StartFailedError (its
        message names the kept sandbox and ends with the command's output).

        on_progress, with an image named by registry reference, is called (every
        0.25 s, as pull_progress answers) while the server fetches it.

        wait=False returns at once when the image is a registry reference the
        node does not have yet: the sandbox's info.state is "pulling" (info.pull:
        the progress) until it is "running", or "failed" (info.error: the code
        and message); refresh it with get(id)."""
        body = create_body(backend, image, cpu, memory, disk, ttl, idle_timeout, env, labels, request_id, pids_max,
                           user_namespace, network, cpu_class, ksm, start_cmd, entrypoint, ready_cmd, ready_port,
                           ready_timeout, wait, allow_setuid)
        if not wait or on_progress is None or not image or not any(c in image for c in "/:@"):
            return self._create(body, None)
        ref, cb = image, on_progress

        def create() -> "Sandbox":
            return self._create(body, None)

        def watch(stopped: Callable[[], bool]) -> None:
            self._watch_pull(ref, cb, stopped)

        return _io.alongside(create, watch)

    def _create(self, body: Dict[str, Any], retries: Optional[int]) -> "Sandbox":
        _, _, data = self._send(Req("POST", "/v1/sandboxes", json_body=body, retry=True), retries=retries)
        return Sandbox(self, SandboxInfo.from_json(decode_json(data)))

    def run(
        self,
        cmd: Cmd,
        timeout: Optional[Seconds] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        stdin: Union[None, str, bytes] = None,
        remove: bool = True,
        **create: Any,
    ) -> RunResult:
        """Create a sandbox, run ``cmd`` in it to completion and, with ``remove``
        (the default), delete it: one request (POST /v1/sandboxes:run), what
        ``dsec run --rm`` does. ``create`` takes :meth:`create`'s keyword
        arguments (``image``, ``memory``, ``env`` for every process, ...;
        not ``wait`` and ``on_progress``); ``timeout``, ``cwd``, ``user`` and
        ``stdin`` are :meth:`Sandbox.exec`'s. The answer is a
        :class:`RunResult`: the exit and the whole output as with exec (a
        non-zero exit is not an exception), ``sandbox`` and ``remove_error``.
        The server deletes the sandbox however the command ends, also when
        this call is interrupted. A run refused before its sandbox exists (a
        bad argument, a missing image) raises and leaves nothing behind.
        Never retried."""
        body = run_request(cmd, create, timeout, cwd, user, stdin, remove)
        ev = RunEvents()
        for line in self._http.stream_lines("POST", RUN_PATH, body, "application/x-ndjson", self.timeout):
            ev.feed(line)
        return ev.result()

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
        lists the failures. A server with ``POST /v1/sandboxes:batch`` (a
        cluster's API server places the whole batch at once) gets one batch
        request, all or nothing on its side; its error names the first failure. ``kw`` are :meth:`create`'s arguments; a ``request_id``
        there is used as a prefix ("ID-0", "ID-1", ...) so a repeated create_many
        returns the same sandboxes.
        """
        if n <= 0:
            return []
        unknown = set(kw) - _CREATE_ARGS
        if unknown:
            raise TypeError(f"create_many: unexpected arguments {sorted(unknown)}")
        prefix = kw.pop("request_id", None) or _core.new_request_id()
        bodies = [
            create_body(
                kw.get("backend", "container"), kw.get("image"), kw.get("cpu"), kw.get("memory"),
                kw.get("disk"), kw.get("ttl"), kw.get("idle_timeout"), kw.get("env"), kw.get("labels"),
                f"{prefix}-{i}", kw.get("pids_max"), kw.get("user_namespace"), kw.get("network"), kw.get("cpu_class"), bool(kw.get("ksm")),
                kw.get("start_cmd"), bool(kw.get("entrypoint")), kw.get("ready_cmd"), kw.get("ready_port"), kw.get("ready_timeout"),
            )
            for i in range(n)
        ]
        deadline = None if timeout is None else time.monotonic() + timeout
        if n <= _core.MAX_BATCH and self._batch is not False:
            made = self._create_batch(bodies, deadline)
            if made is not None:
                return made
        results: List[Optional[Sandbox]] = [None] * n
        failures: List[Tuple[int, BaseException]] = []

        def one(i: int) -> None:
            attempt = 0
            while True:
                try:
                    results[i] = self._create(bodies[i], 0)
                    return
                except DsecError as e:
                    if not e.retryable or (deadline is not None and time.monotonic() >= deadline):
                        failures.append((i, e))
                        return
                except Exception as e:  # noqa: BLE001 - reported with the others
                    failures.append((i, e))
                    return
                _io.sleep(backoff(attempt, 0.05, 2.0))
                attempt += 1

        try:
            _io.map_limited(one, range(n), concurrency)
        except BaseException:
            _delete_all([s for s in results if s is not None], concurrency)
            raise
        made = [s for s in results if s is not None]
        if failures:
            failures.sort(key=lambda f: f[0])
            bad = _delete_all(made, concurrency)
            raise CreateManyError(failures, n, deleted=len(made) - len(bad), cleanup_failures=bad)
        return made  # type: ignore[return-value]

    def _create_batch(self, bodies: List[Dict[str, Any]], deadline: Optional[float]) -> Optional[List["Sandbox"]]:
        """One POST /v1/sandboxes:batch (all or nothing on the server), retried
        with the same request ids on retryable errors until the deadline; None
        when the server has no batch route (create_many then creates one by one)."""
        attempt = 0
        while True:
            try:
                req = Req("POST", _core.BATCH_PATH, json_body={"sandboxes": bodies}, retry=True)
                _, _, data = self._send(req, retries=0)
            except DsecError as e:
                if _core.batch_unsupported(e):
                    self._batch = False
                    return None
                if not e.retryable or (deadline is not None and time.monotonic() >= deadline):
                    raise CreateManyError([(_core.batch_failure_index(e), e)], len(bodies)) from e
                _io.sleep(backoff(attempt, 0.05, 2.0))
                attempt += 1
                continue
            self._batch = True
            doc = decode_json(data)
            return [Sandbox(self, SandboxInfo.from_json(d)) for d in doc.get("sandboxes") or []]

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

    # ---- FnCall ----------------------------------------------------------------------

    def fncall(
        self,
        language: Optional[str] = None,
        source: Optional[str] = None,
        files: Optional[Mapping[str, str]] = None,
        tests: Optional[List[Any]] = None,
        limits: Optional[Mapping[str, Any]] = None,
        cmd: Optional[Cmd] = None,
        image: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        device: Optional[str] = None,
    ) -> FnCallResult:
        """Run a program against tests, each in a fresh limited sandbox (POST
        /v1/fncall). ``language``: python3, c, c++, go, bash (or ``cmd``, a raw
        command run in /w). ``source`` is the program; ``files`` more files by path.
        ``tests``: [{"stdin", "expected_output", "compare": {"mode", "epsilon"}}].
        ``limits``: cpu_time_ms, wall_time_ms, memory_bytes, processes,
        output_bytes, file_size_bytes. The program's failure is a verdict in the
        result, not an exception. Retried on retryable errors (no side effects)."""
        body = fncall_body(language, source, files, tests, limits, cmd, image, env, device)
        req = Req("POST", "/v1/fncall", json_body=body, retry=True, timeout=fncall_http_timeout(self.timeout))
        return FnCallResult.from_json(self._json(req) or {})

    def fncall_batch(self, calls: Iterable[Mapping[str, Any]], **defaults: Any) -> Iterator[FnCallResult]:
        """Run many fncalls in one request (POST /v1/fncall/batch) and yield each
        result as it finishes (completion order; ``result.index`` is its position
        in ``calls``): ``async for r in client.fncall_batch(calls)``. Each call is a
        dict of :meth:`fncall` arguments; ``defaults`` (e.g. ``limits=``,
        ``language=``) apply to every call that lacks them. A call that could not
        run yields a result with ``.error`` set. Not retried."""
        bodies = [fncall_body(**{**defaults, **dict(c)}) for c in calls]
        if not bodies:
            return
        data = json.dumps({"calls": bodies}, separators=(",", ":")).encode()
        for line in self._http.stream_lines("POST", "/v1/fncall/batch", data, "application/json", self.timeout):
            yield FnCallResult.from_json(json.loads(line))

    # ---- trajectories ------------------------------------------------------------

    def trajectory(self, traj_id: str, sandbox: Optional["Sandbox"] = None, start: int = 1) -> "Trajectory":
        """A :class:`Trajectory` that numbers its steps itself, from ``start``."""
        return Trajectory(self, traj_id, sandbox, start)

    def trajectories(self) -> List[TrajectoryInfo]:
        """Every logged trajectory (without steps)."""
        doc = self._json(Req("GET", "/v1/trajectories", retry=True)) or {}
        return [TrajectoryInfo.from_json(d) for d in doc.get("trajectories") or []]


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

    _io.map_limited(rm, sbs, concurrency)
    return bad


class Sandbox:
    """One sandbox. A context manager: leaving the block deletes it."""

    def __init__(self, client: Client, info: SandboxInfo) -> None:
        self.client = client
        self.info = info
        self.id = info.id
        self.files = Files(self)
        self.trajectory: Optional[Trajectory] = None
        """Set on the view ``traj.sandbox(sb)`` returns: its session calls are steps."""
        self.last_reclaim: Optional[ReclaimResult] = None
        """What the last ``pause(reclaim=True)`` pushed out of RAM."""

    def __repr__(self) -> str:
        t = f", trajectory={self.trajectory.id!r}" if self.trajectory is not None else ""
        return f"Sandbox({self.id!r}, state={self.info.state!r}{t})"

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
        if req.step and self.trajectory is not None:
            return self.trajectory._step(req, raw)
        return self.client._send(req, raw)

    def _json(self, req: Req) -> Any:
        return decode_json((self._send(req))[2])

    def _update(self, doc: Any) -> "Sandbox":
        if doc:
            self.info = SandboxInfo.from_json(doc)
        return self

    # ---- lifecycle -------------------------------------------------------------------

    def refresh(self) -> "Sandbox":
        """Re-read the sandbox's description (``.info``)."""
        return self._update(self._json(Req("GET", sandbox_path(self.id), retry=True)))

    def pause(self, reclaim: bool = False, memory: bool = True) -> "Sandbox":
        """Freeze every process. With ``reclaim=True`` the frozen sandbox's memory
        is then pushed out of RAM (into the node's swap; without swap only page
        cache, which ``last_reclaim.note`` says); resume prefetches it back.
        ``last_reclaim`` holds what moved. With ``memory=False`` the pause keeps
        only the files: every process is stopped and its memory freed, and resume
        boots the sandbox afresh on its files under the same ID (a backend
        without it raises NotImplementedByBackendError)."""
        if not memory:
            if reclaim:
                raise ValueError("pause: reclaim needs memory=True (a filesystem-only pause frees all memory)")
            return self._update(self._json(Req("POST", sandbox_path(self.id, "/pause"), json_body={"memory": False})))
        if not reclaim:
            return self._update(self._json(Req("POST", sandbox_path(self.id, "/pause"))))
        doc = self._json(Req("POST", sandbox_path(self.id, "/pause"), json_body={"reclaim": True}, retry=True))
        self.last_reclaim = ReclaimResult.from_json((doc or {}).get("reclaim") or {})
        return self._update(doc)

    def set_cpu_class(self, cpu_class: str) -> "Sandbox":
        """Change the CPU class while it runs: "ls" (latency-sensitive) or "be"
        (best-effort: an idle cgroup, threads SCHED_IDLE)."""
        return self._update(self._json(Req("PUT", sandbox_path(self.id, "/cpu-class"),
                                                 json_body={"cpu_class": cpu_class}, retry=True)))

    def resume(self) -> "Sandbox":
        return self._update(self._json(Req("POST", sandbox_path(self.id, "/resume"))))

    def set_network(self, allow: Optional[Any] = None, rules: Optional[Any] = None,
                          allow_domains: Optional[Any] = None, deny_domains: Optional[Any] = None) -> "Sandbox":
        """Replace the sandbox's egress policy (per task stage): ``allow`` entries
        "CIDR[:PORT[-PORT]]", ``rules`` names of the operator's rule sets,
        ``allow_domains`` names reachable once the sandbox resolved them (exact, or
        "*." for subdomains), ``deny_domains`` names answered NXDOMAIN; with none,
        nothing is allowed. New connections see it at once. ``.info.network``
        then shows the policy and the count of denied connection attempts."""
        body = _core.network_body(allow, rules, allow_domains, deny_domains)
        return self._update(self._json(Req("PUT", sandbox_path(self.id, "/network"), json_body=body, retry=True)))

    def reset(self) -> "Sandbox":
        """A fresh writable layer; every process is killed."""
        return self._update(self._json(Req("POST", sandbox_path(self.id, "/reset"))))

    def fork(self, n: int = 1, **overrides: Any) -> List["Sandbox"]:
        """Make ``n`` sandboxes on this node that start from this sandbox's current
        file system (a GRPO group). Only files are copied, not processes or memory:
        each child boots its own init. The children inherit limits, env, labels and
        timeouts; keyword ``overrides`` (cpu=, memory_bytes=, env=, labels=, ...)
        change them. All or nothing. Works on a paused sandbox."""
        body: Dict[str, Any] = {"count": n}
        if overrides:
            body["overrides"] = overrides
        doc = self._json(Req("POST", sandbox_path(self.id, "/fork"), json_body=body, timeout=None))
        return [Sandbox(self.client, SandboxInfo.from_json(c)) for c in doc.get("children", [])]

    def commit(self, name: str, exclude: Optional[List[str]] = None, default_exclude: bool = True) -> Dict[str, Any]:
        """Pack this sandbox's writable layer into the new environment ``name``
        (its environment + one EROFS layer; /tmp, caches and build residue left
        out, plus ``exclude``). Returns the commit result (``image``, ``layer``).
        Fork and commit wait without a socket timeout: packing takes seconds per
        few hundred MB."""
        body: Dict[str, Any] = {"name": name, "exclude": list(exclude or [])}
        if not default_exclude:
            body["no_default_exclude"] = True
        return self._json(Req("POST", sandbox_path(self.id, "/commit"), json_body=body, timeout=None))

    def screenshot(self) -> bytes:
        """The display as PNG bytes (fullvm; NotImplementedError-class API error
        ``not_implemented`` for backends without a display)."""
        return (self._send(Req("GET", sandbox_path(self.id, "/screen"), retry=True)))[2]

    def send_input(self, text: Optional[str] = None, key: Optional[str] = None,
                         click: Optional[Any] = None, button: str = "left") -> Dict[str, Any]:
        """Type ``text``, press ``key`` ("ret", "ctrl-c") or click at ``click``
        = (x, y) on the display (fullvm). Returns {"events": N}."""
        body = _core.input_body(text, key, click, button)
        return self._json(Req("POST", sandbox_path(self.id, "/input"), json_body=body))

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
                  timeout=exec_http_timeout(self.client.timeout, timeout), step=True)
        return ExecResult.from_json(self._json(req))

    def exec_stream(
        self,
        cmd: Cmd,
        timeout: Optional[Seconds] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        stdin: Stdin = None,
        tty: bool = False,
        cols: Optional[int] = None,
        rows: Optional[int] = None,
    ) -> "ExecStream":
        """Run a command with live output. Iterate the returned :class:`ExecStream`
        (``async for`` on the asyncio client): it yields :class:`StreamChunk`
        ``(stream, data)`` items as output arrives and finally the
        :class:`ExecResult` (whose stdout/stderr are empty: they were streamed).
        ``stdin`` (bytes, str or an iterable of bytes; for the asyncio client also
        an async iterable) is sent while the output is read;
        ``signal("SIGTERM")`` signals the process. The sync client sends the
        request here (a refusal raises here); the asyncio client when the stream
        is first iterated or written to.

        ``tty=True`` runs the command on a terminal of ``cols`` x ``rows`` (default
        80x24) in the sandbox: all output arrives as "stdout" chunks, stdin stays
        open when ``stdin`` is None so :meth:`ExecStream.write` types into it
        (b"\\x03" is Ctrl-C), and :meth:`ExecStream.resize` changes the size.
        An input line the server refuses (a size out of 1..1000, an unknown signal)
        does not end the stream: its error is appended to ``input_errors``."""
        body = with_tty(exec_body(cmd, timeout, env, cwd, user, None), tty, cols, rows)
        return _io.started(ExecStream(self.client, self.id, body, stdin, self.trajectory))

    # ---- background processes ----------------------------------------------------

    def spawn(
        self,
        cmd: Cmd,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        stdin: Union[None, str, bytes] = None,
        timeout: Optional[Seconds] = None,
        tty: bool = False,
        cols: Optional[int] = None,
        rows: Optional[int] = None,
    ) -> "Process":
        """Start a background process (it survives a server restart). With
        ``tty=True`` it runs on a terminal of ``cols`` x ``rows`` and all its
        output is in ``logs("stdout")``."""
        body = with_tty(exec_body(cmd, timeout, env, cwd, user, stdin), tty, cols, rows)
        doc = self._json(Req("POST", sandbox_path(self.id, "/processes"), json_body=body, step=True))
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
                  timeout=timeout if timeout is not None else _core._UNSET, step=True)
        status, h, data = self._send(req, raw=True)
        if status >= 300 and "x-dsec-error" in h:
            raise error_from_response(status, data)
        return HTTPResponse(status, h, data)


    # ---- code interpreter ------------------------------------------------------------

    def run_code(
        self,
        code: str,
        language: Optional[str] = None,
        context: Union[None, str, CodeContext] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[Seconds] = None,
        on_stdout: Optional[Callable[[str], Any]] = None,
        on_stderr: Optional[Callable[[str], Any]] = None,
        on_result: Optional[Callable[[CodeResult], Any]] = None,
        on_error: Optional[Callable[[CodeError], Any]] = None,
    ) -> Execution:
        """Run a cell in the sandbox's code interpreter (started on first use; the
        image needs python3 with ipykernel, as ``code-interpreter-v1`` has):
        variables persist between calls of one language (or ``context``, a
        :class:`CodeContext` or its id, see :meth:`create_code_context`).
        ``language``: python (default), javascript, typescript, bash, r, java. ``env`` is
        set for this cell only; a cell past ``timeout`` is interrupted and its
        :class:`Execution` has an error named TimeoutError. The callbacks get
        output as it arrives. The cell's own exception is ``Execution.error``,
        not raised; a bad language or an unknown context raise
        InvalidArgumentError / NotFoundError. Never retried."""
        body = code_body(code, language, context, env, timeout)
        data = json.dumps(body, separators=(",", ":")).encode()
        ex = Execution()
        for line in self.client._http.stream_lines("POST", sandbox_path(self.id, "/code:run"), data,
                                                         "application/json", None):
            code_event(ex, json.loads(line), on_stdout, on_stderr, on_result, on_error)
        return ex

    def create_code_context(self, language: Optional[str] = None, cwd: Optional[str] = None) -> CodeContext:
        """Start a context of the code interpreter: a kernel of its own of
        ``language`` (python default) in ``cwd`` (default /home/user), for
        ``run_code(context=...)``. An unknown language or a cwd that is not a
        directory raise InvalidArgumentError."""
        body: Dict[str, Any] = {}
        if language:
            body["language"] = language
        if cwd:
            body["cwd"] = cwd
        return CodeContext.from_json(self._json(Req("POST", code_context_path(self.id), json_body=body)))

    def list_code_contexts(self) -> List[CodeContext]:
        """The code interpreter's contexts, the default one of each language used included."""
        doc = self._json(Req("GET", code_context_path(self.id), retry=True))
        return [CodeContext.from_json(d) for d in (doc or {}).get("contexts") or []]

    def restart_code_context(self, context: Union[str, CodeContext]) -> None:
        """Replace the context's kernel by a fresh one: its state is gone, its id kept."""
        self._send(Req("POST", code_context_path(self.id, context, "/restart")))

    def remove_code_context(self, context: Union[str, CodeContext]) -> None:
        """End the context and its kernel (NotFoundError when there is none)."""
        self._send(Req("DELETE", code_context_path(self.id, context)))

class Files:
    """``sandbox.files``: every path is resolved inside the sandbox's root."""

    def __init__(self, sb: Sandbox) -> None:
        self._sb = sb

    def read(self, path: str) -> bytes:
        return (self._sb._send(files_req("GET", self._sb.id, "", path, step=True)))[2]

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (self.read(path)).decode(encoding)

    def write(self, path: str, data: Union[bytes, str], mode: int = 0o644) -> FileInfo:
        """Create or replace a file (parents must exist; see :meth:`mkdir`)."""
        if isinstance(data, str):
            data = data.encode()
        req = files_req("PUT", self._sb.id, "", path, query={"mode": f"{mode:04o}"},
                        body=bytes(data), ctype="application/octet-stream", step=True)
        return FileInfo.from_json(decode_json((self._sb._send(req))[2]))

    def list(self, path: str) -> List[FileInfo]:
        doc = decode_json((self._sb._send(files_req("GET", self._sb.id, "/list", path)))[2])
        return [FileInfo.from_json(d) for d in (doc or {}).get("files") or []]

    def stat(self, path: str) -> FileInfo:
        """Describe path (a final symlink is not followed)."""
        return FileInfo.from_json(decode_json((self._sb._send(files_req("GET", self._sb.id, "/stat", path)))[2]))

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
        self._sb._send(Req("POST", sandbox_path(self._sb.id, "/files/mkdir"), json_body=body, step=True))

    def remove(self, path: str, recursive: bool = False) -> None:
        q = {"recursive": "true"} if recursive else None
        self._sb._send(files_req("DELETE", self._sb.id, "", path, query=q, step=True))

    def upload(self, local: PathLike, remote_dir: str) -> None:
        """Upload a local directory's *contents* into remote_dir (created if
        missing), or a single file as remote_dir/<its name>, as one tar."""
        data = _io.run_blocking(make_tar, local)
        self.upload_tar(data, remote_dir)

    def upload_tar(self, data: bytes, remote_dir: str) -> None:
        """Extract a tar (plain or gzip) into remote_dir."""
        req = files_req("PUT", self._sb.id, "/archive", remote_dir, body=data, ctype="application/x-tar", step=True)
        self._sb._send(req)

    def download_tar(self, remote_path: str) -> bytes:
        """remote_path (file or tree) as an uncompressed tar; entry names start with
        its base name."""
        return (self._sb._send(files_req("GET", self._sb.id, "/archive", remote_path)))[2]

    def download(self, remote_path: str, local_dir: PathLike) -> None:
        """Download remote_path (a file or a tree) into local_dir: "/work" becomes
        local_dir/work. Extraction is safe: absolute names, ".." escapes, links
        pointing outside local_dir and device files are refused."""
        data = self.download_tar(remote_path)
        _io.run_blocking(safe_extract, data, local_dir)


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
        return (self.sandbox._send(req))[2]


class ExecStream:
    """A running streaming exec (POST .../exec/stream, full-duplex NDJSON).

    Iterating yields :class:`StreamChunk` items in the order the server sent them,
    then the final :class:`ExecResult` (also kept in ``.result``). The request body
    is sent with chunked encoding: the request line first, stdin while the output
    is read (from a helper thread or task), so a process that writes before it
    reads cannot deadlock. Leaving the iteration early closes the connection, which
    kills the process.
    """

    def __init__(self, client: Client, sid: str, body: Dict[str, Any], stdin: Stdin,
                 traj: Optional["Trajectory"] = None) -> None:
        self.result: Optional[ExecResult] = None
        self.pid: Optional[int] = None
        self.tty = bool(body.get("tty"))
        # Input lines the server refused (each an InvalidArgumentError), in order.
        self.input_errors: List[DsecError] = []
        # With a terminal and no stdin given, stdin stays open for write().
        self._stdin_closed = not (self.tty and stdin is None)
        self._traj = traj
        self._started = False
        self._finished = False
        first = json.dumps(body, separators=(",", ":")).encode() + b"\n"
        # The connection (sent by _start); the client's timeout bounds the draining
        # of the answer after the exit event.
        self._conn = _io.StreamConn(client._http, sandbox_path(sid, "/exec/stream"), first, stdin,
                                    not self._stdin_closed, client.timeout)

    def _start(self) -> None:
        """Send the request (once) and read the answer's head. A trajectory step
        takes its number here."""
        if self._started:
            return
        self._started = True
        traj = self._traj
        step, hdrs = traj._counter.begin() if traj is not None else (0, {})
        try:
            h = self._conn.start(hdrs)
        except DsecError as e:
            if traj is not None:
                traj._counter.end(step, e)
            raise
        if traj is not None:
            # The step started on the server: it is logged (or left unknown if this
            # stream is abandoned), so the next call takes the next number.
            traj._counter.end(step, None, h.get(REPLAYED_HEADER) == "true")

    def signal(self, sig: Union[str, int] = "SIGTERM") -> None:
        """Send a signal to the process group (with a terminal: its foreground
        process group) while it runs."""
        self._send_line(_core.signal_line(sig), "sending a signal")

    def write(self, data: Union[str, bytes]) -> None:
        """Type data into the process's stdin (its terminal with ``tty=True``)
        while it runs. Only while stdin is open: a tty stream started without
        ``stdin``, until :meth:`close_stdin`."""
        if self._stdin_closed:
            raise InvalidArgumentError("exec stream: stdin is closed (write needs tty=True and no stdin argument)")
        b = _core.as_bytes(data)
        for i in range(0, len(b), 48 << 10):
            self._send_line(_core.stdin_line(b[i : i + (48 << 10)]), "writing stdin")

    def close_stdin(self) -> None:
        """End the process's stdin (on a terminal: its end of input, ^D, is typed;
        closing twice is a no-op)."""
        if not self._stdin_closed:
            self._stdin_closed = True
            self._send_line(_core.EOF_LINE, "closing stdin")

    def resize(self, cols: int, rows: int) -> None:
        """Set the terminal's size (``tty=True`` only); the program gets SIGWINCH."""
        if not self.tty:
            raise InvalidArgumentError("exec stream: resize needs a terminal (tty=True)")
        self._send_line(_core.resize_line(cols, rows), "resizing the terminal")

    def _send_line(self, line: bytes, what: str) -> None:
        self._start()
        try:
            self._conn.write(line)
        except OSError as e:
            raise network_error(e, f"exec stream: {what} failed") from e

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[Union[StreamChunk, ExecResult]]:
        return self._events()

    def _events(self) -> Iterator[Union[StreamChunk, ExecResult]]:
        try:
            self._start()
            while True:
                line = self._conn.readline()
                if not line:
                    raise InfrastructureError("exec stream ended before the exit event", retryable=False)
                line = line.strip()
                if not line:
                    continue
                ev = json.loads(line)
                typ = ev.get("type")
                if typ in ("stdout", "stderr"):
                    d = ev.get("data")
                    yield StreamChunk(typ, base64.b64decode(d) if d else b"")
                elif typ == "started":
                    self.pid = ev.get("pid")
                elif typ == "exit":
                    self.result = ExecResult.from_json(ev.get("result") or {})
                    self._finished = True
                    self._conn.finish()
                    yield self.result
                    return
                elif typ == "error":
                    raise error_from_response(200, json.dumps({"error": ev.get("error") or {}}).encode())
                elif typ == "input_error":
                    # A refused input line (bad size, unknown signal): the exec goes on.
                    self.input_errors.append(error_from_response(400, json.dumps({"error": ev.get("error") or {}}).encode()))
        finally:
            self.close()

    def wait(self) -> ExecResult:
        """Consume the stream, discarding output, and return the result."""
        for _ in self:
            pass
        assert self.result is not None
        return self.result

    def close(self) -> None:
        """Stop: if the process still runs, the closed connection kills it."""
        if not self._finished:
            self._conn.abort()


class Trajectory:
    """A trajectory of steps that numbers them itself (``client.trajectory(id)``).

    Session calls made through it -- ``traj.exec(sb, cmd)``, ``traj.files.write``
    (with a bound sandbox), or any call on the view ``traj.sandbox(sb)`` -- carry
    the headers X-Dsec-Trajectory: id and X-Dsec-Step: n with n = 1, 2, ... The
    server logs each step; a new Trajectory object for the same id starts at step 1
    again, so a resumed trainer that re-issues the same calls in the same order is
    answered from the log (``result.replayed``) and continues live at the first new
    step. A changed call raises :class:`TrajectoryDivergedError`; a step the server
    started but never finished raises :class:`OutcomeUnknownError` and the counter
    moves past it, so the next call continues. Steps are sequential: one at a time.

    Tagged calls: exec, exec_stream, spawn, files.read/read_text/write/mkdir/
    remove/upload/upload_tar, http, and ``traj.fncall`` (no sandbox). Others (stat, list, processes, pause, ...) are
    sent untagged.
    """

    def __init__(self, client: Client, traj_id: str, sandbox: Optional[Sandbox] = None,
                 start: int = 1) -> None:
        self.client = client
        self.id = traj_id
        self._counter = StepCounter(traj_id, start)
        self._sb: Optional[Sandbox] = self.sandbox(sandbox) if sandbox is not None else None

    def __repr__(self) -> str:
        return f"Trajectory({self.id!r}, next_step={self.next_step})"

    @property
    def next_step(self) -> int:
        """The number the next step will carry."""
        return self._counter.next

    @next_step.setter
    def next_step(self, n: int) -> None:
        if n < 1:
            raise ValueError("steps start at 1")
        self._counter.next = int(n)

    @property
    def replayed_steps(self) -> int:
        """Steps of this object answered from the log."""
        return self._counter.replayed_steps

    @property
    def live_steps(self) -> int:
        """Steps of this object that ran live."""
        return self._counter.live_steps

    @property
    def last_replayed(self) -> bool:
        """Whether the last successful step was answered from the log."""
        return self._counter.last_replayed

    def sandbox(self, sb: Union[None, Sandbox, str] = None) -> Sandbox:
        """A view of ``sb`` (a sandbox or an id; default the bound one) whose
        session calls are steps of this trajectory."""
        if sb is None:
            if self._sb is None:
                raise ValueError("this trajectory has no bound sandbox: pass one")
            return self._sb
        info = sb.info if isinstance(sb, Sandbox) else SandboxInfo(id=str(sb))
        view = Sandbox(self.client, info)
        view.trajectory = self
        return view

    def _split(self, a: Tuple[Any, ...]) -> Tuple[Sandbox, Tuple[Any, ...]]:
        if a and isinstance(a[0], Sandbox):
            return self.sandbox(a[0]), a[1:]
        return self.sandbox(), a

    def _step(self, req: Req, raw: bool) -> Tuple[int, Dict[str, str], bytes]:
        n, h = self._counter.begin()
        with_headers(req, h)
        try:
            status, headers, body = self.client._send(req, raw)
        except DsecError as e:
            self._counter.end(n, e)
            raise
        err = error_from_response(status, body) if raw and status >= 300 and "x-dsec-error" in headers else None
        self._counter.end(n, err, headers.get(REPLAYED_HEADER) == "true")
        return status, headers, body

    # ---- steps (sandbox first, or the bound sandbox) ---------------------------------

    def exec(self, *a: Any, **kw: Any) -> ExecResult:
        """``traj.exec(sb, cmd, ...)`` or ``traj.exec(cmd, ...)`` on the bound sandbox."""
        sb, rest = self._split(a)
        return sb.exec(*rest, **kw)

    def exec_stream(self, *a: Any, **kw: Any) -> ExecStream:
        sb, rest = self._split(a)
        return sb.exec_stream(*rest, **kw)

    def spawn(self, *a: Any, **kw: Any) -> Process:
        sb, rest = self._split(a)
        return sb.spawn(*rest, **kw)

    def http(self, *a: Any, **kw: Any) -> HTTPResponse:
        sb, rest = self._split(a)
        return sb.http(*rest, **kw)

    @property
    def files(self) -> Files:
        """The bound sandbox's files, as steps."""
        return self.sandbox().files

    def fncall(self, *a: Any, **kw: Any) -> FnCallResult:
        """A FnCall (same arguments as :meth:`Client.fncall`) as a step: it needs no
        sandbox, and a re-issued step is answered from the log, not run again."""
        req = Req("POST", "/v1/fncall", json_body=fncall_body(*a, **kw), retry=True,
                  timeout=fncall_http_timeout(self.client.timeout))
        return FnCallResult.from_json(decode_json((self._step(req, False))[2]) or {})

    # ---- the log ---------------------------------------------------------------------

    def get(self) -> TrajectoryInfo:
        """GET /v1/trajectories/{id}: the trajectory with its steps."""
        return TrajectoryInfo.from_json(self.client._json(Req("GET", _traj_path(self.id), retry=True)) or {})

    def steps(self) -> List[TrajectoryStep]:
        """The logged steps, in order."""
        return (self.get()).steps

    def export(self) -> str:
        """The log as JSON lines, one step per line."""
        return (self.client._send(Req("GET", _traj_path(self.id, "/export"), retry=True)))[2].decode()

    def delete(self) -> None:
        """Delete the log (NotFoundError if there is none)."""
        self.client._send(Req("DELETE", _traj_path(self.id), retry=True, gone_ok=True))

    def rebuild(self) -> RebuildResult:
        """Replace the trajectory's lost sandbox: the server creates a fresh one with
        the recorded parameters and re-executes the logged mutating steps. The
        bound sandbox (if any) becomes the new one; live steps must use it."""
        doc = self.client._json(Req("POST", _traj_path(self.id, "/rebuild"), timeout=None))
        res = RebuildResult.from_json(doc or {})
        if res.sandbox_id:
            self._sb = self.sandbox(res.sandbox_id)
        return res


def _traj_path(tid: str, rest: str = "") -> str:
    return "/v1/trajectories/" + _core.esc(tid) + rest

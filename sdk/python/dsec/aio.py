"""The asyncio client: :class:`AsyncClient`, :class:`AsyncSandbox`,
:class:`AsyncFiles`, :class:`AsyncProcess`, :class:`AsyncExecStream`. It mirrors the
sync client call for call (``await sb.exec(...)``, ``async for`` on exec_stream)
and needs nothing but the standard library: HTTP/1.1 is spoken over
``asyncio.open_connection`` with a keep-alive pool."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import (
    Any,
    AsyncIterable,
    AsyncIterator,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Tuple,
    Union,
)

from . import _core
from ._async_http import AConn, APool, build_head, default_headers, roundtrip
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
    with_tty,
    files_req,
    http_proxy_path,
    process_path,
    sandbox_path,
    should_retry,
    StepCounter,
    REPLAYED_HEADER,
    fncall_body,
    fncall_http_timeout,
    with_headers,
)
from ._tar import PathLike, make_tar, safe_extract
from .errors import (
    CreateManyError,
    DsecError,
    InfrastructureError,
    InvalidArgumentError,
    NotFoundError,
    error_from_response,
    network_error,
)
from .types import (
    ExecResult,
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

__all__ = ["AsyncClient", "AsyncSandbox", "AsyncFiles", "AsyncProcess", "AsyncExecStream", "AsyncTrajectory"]

AStdin = Union[None, str, bytes, Iterable[bytes], AsyncIterable[bytes]]


class AsyncClient:
    """The asyncio twin of :class:`dsec.Client` (same arguments, same semantics).
    Use it from one event loop at a time; ``await client.aclose()`` (or ``async
    with``) closes its idle connections."""

    def __init__(
        self,
        addr: Optional[str] = None,
        token: Optional[str] = None,
        timeout: Optional[float] = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        pool_size: int = 256,
    ) -> None:
        self.addr, self._host, self._port, self._prefix = _core.resolve_addr(addr)
        self.token = _core.resolve_token(token)
        self.timeout = timeout
        self.retries = max(0, int(retries))
        self._pool_size = pool_size
        self._pools: Dict[int, Tuple[asyncio.AbstractEventLoop, APool]] = {}
        self._headers = default_headers(self.token)
        self._host_hdr = self._host if self._port == 80 else f"{self._host}:{self._port}"

    @property
    def _pool(self) -> APool:
        loop = asyncio.get_running_loop()
        ent = self._pools.get(id(loop))
        if ent is None or ent[0] is not loop:
            for k, (lp, p) in list(self._pools.items()):
                if lp.is_closed():
                    del self._pools[k]
            ent = (loop, APool(self._host, self._port, self._pool_size))
            self._pools[id(loop)] = ent
        return ent[1]

    async def aclose(self) -> None:
        self._pool.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"AsyncClient({self.addr!r})"

    async def _send(self, req: Req, raw: bool = False, retries: Optional[int] = None) -> Tuple[int, Dict[str, str], bytes]:
        n = self.retries if retries is None else retries
        attempt = 0
        while True:
            try:
                status, headers, body = await roundtrip(self._pool, req, self._headers, self._prefix,
                                                        self._host_hdr, self.timeout)
                if status >= 300 and not raw:
                    raise error_from_response(status, body)
                return status, headers, body
            except DsecError as e:
                if req.gone_ok and attempt > 0 and isinstance(e, NotFoundError):
                    return 204, {}, b""
                if not should_retry(req, e, attempt, n):
                    raise
            await asyncio.sleep(backoff(attempt))
            attempt += 1

    async def _json(self, req: Req) -> Any:
        return decode_json((await self._send(req))[2])

    # ---- node --------------------------------------------------------------------

    async def health(self) -> bool:
        doc = await self._json(Req("GET", "/v1/health", retry=True))
        return bool(doc and doc.get("ok"))

    async def info(self) -> Dict[str, Any]:
        return dict(await self._json(Req("GET", "/v1/info", retry=True)) or {})

    async def images(self) -> List[Dict[str, Any]]:
        return list(await self._json(Req("GET", "/v1/images", retry=True)) or [])

    async def image(self, name: str) -> Dict[str, Any]:
        return dict(await self._json(Req("GET", "/v1/images/" + _core.esc(name), retry=True)) or {})

    async def compose_image(self, name: str, base: str, toolkits: Optional[List[str]] = None,
                            workspace: Optional[str] = None) -> Dict[str, Any]:
        """See :meth:`dsec.Client.compose_image`."""
        body = {"name": name, "base": base, "toolkits": list(toolkits or []), "workspace": workspace or ""}
        return dict(await self._json(Req("POST", "/v1/images", json_body=body)) or {})

    async def delete_image(self, name: str) -> None:
        await self._send(Req("DELETE", "/v1/images/" + _core.esc(name)))

    async def record_image(self, name: str) -> List[Dict[str, Any]]:
        return list(await self._json(Req("POST", "/v1/images/" + _core.esc(name) + "/record")) or [])

    # ---- sandboxes ---------------------------------------------------------------

    async def create(
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
    ) -> "AsyncSandbox":
        """See :meth:`dsec.Client.create`."""
        body = create_body(backend, image, cpu, memory, disk, ttl, idle_timeout, env, labels, request_id, pids_max,
                           user_namespace, network, cpu_class, ksm)
        return await self._create(body, None)

    async def _create(self, body: Dict[str, Any], retries: Optional[int]) -> "AsyncSandbox":
        _, _, data = await self._send(Req("POST", "/v1/sandboxes", json_body=body, retry=True), retries=retries)
        return AsyncSandbox(self, SandboxInfo.from_json(decode_json(data)))

    async def create_many(
        self,
        n: int,
        concurrency: int = 32,
        timeout: Optional[float] = 600.0,
        **kw: Any,
    ) -> List["AsyncSandbox"]:
        """See :meth:`dsec.Client.create_many` (same backpressure handling and the
        same all-or-nothing choice)."""
        if n <= 0:
            return []
        unknown = set(kw) - {"backend", "image", "cpu", "memory", "disk", "ttl", "idle_timeout", "env",
                             "labels", "pids_max", "user_namespace", "request_id", "network", "cpu_class", "ksm"}
        if unknown:
            raise TypeError(f"create_many: unexpected arguments {sorted(unknown)}")
        prefix = kw.pop("request_id", None) or _core.new_request_id()
        bodies = [
            create_body(
                kw.get("backend", "container"), kw.get("image"), kw.get("cpu"), kw.get("memory"),
                kw.get("disk"), kw.get("ttl"), kw.get("idle_timeout"), kw.get("env"), kw.get("labels"),
                f"{prefix}-{i}", kw.get("pids_max"), kw.get("user_namespace"), kw.get("network"), kw.get("cpu_class"), bool(kw.get("ksm")),
            )
            for i in range(n)
        ]
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        if n <= _core.MAX_BATCH and getattr(self, "_batch", None) is not False:
            made = await self._create_batch(bodies, deadline)
            if made is not None:
                return made
        sem = asyncio.Semaphore(max(1, concurrency))
        results: List[Optional[AsyncSandbox]] = [None] * n
        failures: List[Tuple[int, BaseException]] = []

        async def one(i: int) -> None:
            attempt = 0
            async with sem:
                while True:
                    try:
                        results[i] = await self._create(bodies[i], 0)
                        return
                    except DsecError as e:
                        if not e.retryable or (deadline is not None and loop.time() >= deadline):
                            failures.append((i, e))
                            return
                    except asyncio.CancelledError:
                        raise
                    except Exception as e:  # noqa: BLE001
                        failures.append((i, e))
                        return
                    await asyncio.sleep(backoff(attempt, 0.05, 2.0))
                    attempt += 1

        try:
            await asyncio.gather(*(one(i) for i in range(n)))
        except BaseException:
            await _adelete_all([s for s in results if s is not None], concurrency)
            raise
        made = [s for s in results if s is not None]
        if failures:
            failures.sort(key=lambda f: f[0])
            bad = await _adelete_all(made, concurrency)
            raise CreateManyError(failures, n, deleted=len(made) - len(bad), cleanup_failures=bad)
        return made  # type: ignore[return-value]

    async def _create_batch(self, bodies: List[Dict[str, Any]], deadline: Optional[float]) -> Optional[List["AsyncSandbox"]]:
        """See :meth:`dsec.Client._create_batch`."""
        loop = asyncio.get_running_loop()
        attempt = 0
        while True:
            try:
                _, _, data = await self._send(Req("POST", _core.BATCH_PATH, json_body={"sandboxes": bodies}, retry=True), retries=0)
            except DsecError as e:
                if _core.batch_unsupported(e):
                    self._batch = False
                    return None
                if not e.retryable or (deadline is not None and loop.time() >= deadline):
                    raise CreateManyError([(_core.batch_failure_index(e), e)], len(bodies)) from e
                await asyncio.sleep(backoff(attempt, 0.05, 2.0))
                attempt += 1
                continue
            self._batch = True
            doc = decode_json(data)
            return [AsyncSandbox(self, SandboxInfo.from_json(d)) for d in doc.get("sandboxes") or []]

    async def get(self, sandbox_id: str) -> "AsyncSandbox":
        doc = await self._json(Req("GET", sandbox_path(sandbox_id), retry=True))
        return AsyncSandbox(self, SandboxInfo.from_json(doc))

    def sandbox(self, sandbox_id: str) -> "AsyncSandbox":
        return AsyncSandbox(self, SandboxInfo(id=sandbox_id))

    async def list(self) -> List["AsyncSandbox"]:
        doc = await self._json(Req("GET", "/v1/sandboxes", retry=True))
        return [AsyncSandbox(self, SandboxInfo.from_json(d)) for d in _core.sandboxes_from_list(doc)]

    async def delete_all(self, concurrency: int = 32) -> int:
        sbs = await self.list()
        bad = await _adelete_all(sbs, concurrency)
        return len(sbs) - len(bad)

    # ---- FnCall ------------------------------------------------------------------

    async def fncall(
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
        """See :meth:`dsec.Client.fncall`."""
        body = fncall_body(language, source, files, tests, limits, cmd, image, env, device)
        req = Req("POST", "/v1/fncall", json_body=body, retry=True, timeout=fncall_http_timeout(self.timeout))
        return FnCallResult.from_json(await self._json(req) or {})

    async def fncall_batch(self, calls: Iterable[Mapping[str, Any]], **defaults: Any) -> AsyncIterator[FnCallResult]:
        """See :meth:`dsec.Client.fncall_batch`: ``async for r in
        client.fncall_batch(calls)`` yields results as they finish."""
        bodies = [fncall_body(**{**defaults, **dict(c)}) for c in calls]
        if not bodies:
            return
        data = json.dumps({"calls": bodies}, separators=(",", ":")).encode()
        async for line in _astream_lines(self, "POST", "/v1/fncall/batch", data, "application/json"):
            yield FnCallResult.from_json(json.loads(line))

    # ---- trajectories --------------------------------------------------------------

    def trajectory(self, traj_id: str, sandbox: Optional["AsyncSandbox"] = None, start: int = 1) -> "AsyncTrajectory":
        """See :meth:`dsec.Client.trajectory`."""
        return AsyncTrajectory(self, traj_id, sandbox, start)

    async def trajectories(self) -> List[TrajectoryInfo]:
        doc = await self._json(Req("GET", "/v1/trajectories", retry=True)) or {}
        return [TrajectoryInfo.from_json(d) for d in doc.get("trajectories") or []]


_NET_ERRORS = (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError)


async def _astream_lines(client: AsyncClient, method: str, path: str, body: bytes, ctype: str) -> AsyncIterator[bytes]:
    """Send one request and yield the non-empty lines of its answer as they arrive."""
    pool = client._pool
    conn: Optional[AConn] = None
    done = False
    try:
        try:
            conn = await pool.get()
            hdrs = dict(client._headers)
            hdrs["Content-Type"] = ctype
            conn.writer.write(build_head(method, client._prefix + path, client._host_hdr, hdrs, len(body)) + body)
            await conn.writer.drain()
            status, h = await conn.read_head()
            if status >= 300:
                raise error_from_response(status, await conn.read_body(method, status, h))
        except DsecError:
            raise
        except _NET_ERRORS as e:
            raise network_error(e) from e
        chunked = "chunked" in h.get("transfer-encoding", "").lower()
        cl = h.get("content-length")
        left = int(cl) if cl is not None and not chunked else -1
        buf = b""
        while True:
            nl = buf.find(b"\n")
            if nl >= 0:
                line, buf = buf[:nl].strip(), buf[nl + 1 :]
                if line:
                    yield line
                continue
            try:
                if chunked:
                    more = await conn.read_chunk()
                elif left == 0:
                    more = b""
                else:
                    more = await conn.reader.read(65536 if left < 0 else min(left, 65536))
                    if left > 0:
                        left -= len(more)
            except _NET_ERRORS as e:
                raise InfrastructureError(f"stream broke: {type(e).__name__}: {e}", retryable=False) from e
            if not more:
                if buf.strip():
                    yield buf.strip()
                done = chunked or left == 0
                return
            buf += more
    finally:
        if conn is not None:
            if done:
                pool.put(conn)
            else:
                conn.close()


async def _adelete_all(sbs: List["AsyncSandbox"], concurrency: int) -> List[str]:
    sem = asyncio.Semaphore(max(1, concurrency))
    bad: List[str] = []

    async def rm(sb: "AsyncSandbox") -> None:
        async with sem:
            try:
                await sb.delete()
            except NotFoundError:
                pass
            except Exception:  # noqa: BLE001
                bad.append(sb.id)

    await asyncio.gather(*(rm(s) for s in sbs))
    return bad


class AsyncSandbox:
    """See :class:`dsec.Sandbox`; ``async with`` deletes it on exit."""

    def __init__(self, client: AsyncClient, info: SandboxInfo) -> None:
        self.client = client
        self.info = info
        self.id = info.id
        self.files = AsyncFiles(self)
        self.trajectory: Optional[AsyncTrajectory] = None
        self.last_reclaim: Optional[ReclaimResult] = None

    def __repr__(self) -> str:
        t = f", trajectory={self.trajectory.id!r}" if self.trajectory is not None else ""
        return f"AsyncSandbox({self.id!r}, state={self.info.state!r}{t})"

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.delete()
        except NotFoundError:
            pass

    @property
    def state(self) -> str:
        return self.info.state

    async def _send(self, req: Req, raw: bool = False) -> Tuple[int, Dict[str, str], bytes]:
        if req.step and self.trajectory is not None:
            return await self.trajectory._step(req, raw)
        return await self.client._send(req, raw)

    async def _json(self, req: Req) -> Any:
        return decode_json((await self._send(req))[2])

    def _update(self, doc: Any) -> "AsyncSandbox":
        if doc:
            self.info = SandboxInfo.from_json(doc)
        return self

    async def refresh(self) -> "AsyncSandbox":
        return self._update(await self._json(Req("GET", sandbox_path(self.id), retry=True)))

    async def pause(self, reclaim: bool = False) -> "AsyncSandbox":
        """See :meth:`dsec.Sandbox.pause`."""
        if not reclaim:
            return self._update(await self._json(Req("POST", sandbox_path(self.id, "/pause"))))
        doc = await self._json(Req("POST", sandbox_path(self.id, "/pause"), json_body={"reclaim": True}, retry=True))
        self.last_reclaim = ReclaimResult.from_json((doc or {}).get("reclaim") or {})
        return self._update(doc)

    async def set_cpu_class(self, cpu_class: str) -> "AsyncSandbox":
        """See :meth:`dsec.Sandbox.set_cpu_class`."""
        return self._update(await self._json(Req("PUT", sandbox_path(self.id, "/cpu-class"),
                                                 json_body={"cpu_class": cpu_class}, retry=True)))

    async def resume(self) -> "AsyncSandbox":
        return self._update(await self._json(Req("POST", sandbox_path(self.id, "/resume"))))

    async def set_network(self, allow: Optional[Any] = None, rules: Optional[Any] = None) -> "AsyncSandbox":
        """See :meth:`dsec.Sandbox.set_network`."""
        body = _core.network_body(allow, rules)
        return self._update(await self._json(Req("PUT", sandbox_path(self.id, "/network"), json_body=body, retry=True)))

    async def reset(self) -> "AsyncSandbox":
        return self._update(await self._json(Req("POST", sandbox_path(self.id, "/reset"))))

    async def fork(self, n: int = 1, **overrides: Any) -> List["AsyncSandbox"]:
        """See :meth:`dsec.Sandbox.fork`."""
        body: Dict[str, Any] = {"count": n}
        if overrides:
            body["overrides"] = overrides
        doc = await self._json(Req("POST", sandbox_path(self.id, "/fork"), json_body=body, timeout=None))
        return [AsyncSandbox(self.client, SandboxInfo.from_json(c)) for c in doc.get("children", [])]

    async def commit(self, name: str, exclude: Optional[List[str]] = None, default_exclude: bool = True) -> Dict[str, Any]:
        """See :meth:`dsec.Sandbox.commit`."""
        body: Dict[str, Any] = {"name": name, "exclude": list(exclude or [])}
        if not default_exclude:
            body["no_default_exclude"] = True
        return await self._json(Req("POST", sandbox_path(self.id, "/commit"), json_body=body, timeout=None))

    async def screenshot(self) -> bytes:
        """See :meth:`dsec.Sandbox.screenshot`."""
        return (await self._send(Req("GET", sandbox_path(self.id, "/screen"), retry=True)))[2]

    async def send_input(self, text: Optional[str] = None, key: Optional[str] = None,
                         click: Optional[Any] = None, button: str = "left") -> Dict[str, Any]:
        """See :meth:`dsec.Sandbox.send_input`."""
        body = _core.input_body(text, key, click, button)
        return await self._json(Req("POST", sandbox_path(self.id, "/input"), json_body=body))

    async def delete(self) -> None:
        await self._send(Req("DELETE", sandbox_path(self.id), retry=True, gone_ok=True))

    async def exec(
        self,
        cmd: Cmd,
        timeout: Optional[Seconds] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        stdin: Union[None, str, bytes] = None,
        max_output: Optional[Size] = None,
    ) -> ExecResult:
        body = exec_body(cmd, timeout, env, cwd, user, stdin, max_output)
        req = Req("POST", sandbox_path(self.id, "/exec"), json_body=body,
                  timeout=exec_http_timeout(self.client.timeout, timeout), step=True)
        return ExecResult.from_json(await self._json(req))

    def exec_stream(
        self,
        cmd: Cmd,
        timeout: Optional[Seconds] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        stdin: AStdin = None,
        tty: bool = False,
        cols: Optional[int] = None,
        rows: Optional[int] = None,
    ) -> "AsyncExecStream":
        """``async for item in sb.exec_stream(...)``: StreamChunk items, then the
        ExecResult. Truly full-duplex: stdin (bytes, str, or a sync or async
        iterable of bytes) is written by a task while the output is read.
        ``tty=True``: as :meth:`dsec.Sandbox.exec_stream` (``await write()``,
        ``await resize()``, ``await close_stdin()``)."""
        body = with_tty(exec_body(cmd, timeout, env, cwd, user, None), tty, cols, rows)
        return AsyncExecStream(self.client, self.id, body, stdin, self.trajectory)

    async def spawn(
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
    ) -> "AsyncProcess":
        """Start a background process; ``tty=True`` as :meth:`dsec.Sandbox.spawn`."""
        body = with_tty(exec_body(cmd, timeout, env, cwd, user, stdin), tty, cols, rows)
        doc = await self._json(Req("POST", sandbox_path(self.id, "/processes"), json_body=body, step=True))
        return AsyncProcess(self, ProcessInfo.from_json(doc))

    async def processes(self) -> List["AsyncProcess"]:
        doc = await self._json(Req("GET", sandbox_path(self.id, "/processes"), retry=True))
        return [AsyncProcess(self, ProcessInfo.from_json(d)) for d in (doc or {}).get("processes") or []]

    async def process(self, process_id: str) -> "AsyncProcess":
        doc = await self._json(Req("GET", process_path(self.id, process_id), retry=True))
        return AsyncProcess(self, ProcessInfo.from_json(doc))

    async def http(
        self,
        port: int,
        method: str = "GET",
        path: str = "/",
        body: Union[None, bytes, str] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> HTTPResponse:
        if isinstance(body, str):
            body = body.encode()
        req = Req(method.upper(), http_proxy_path(self.id, port, path), body=body, headers=headers,
                  timeout=timeout if timeout is not None else _core._UNSET, step=True)
        status, h, data = await self._send(req, raw=True)
        if status >= 300 and "x-dsec-error" in h:
            raise error_from_response(status, data)
        return HTTPResponse(status, h, data)


class AsyncFiles:
    """See :class:`dsec.Files`."""

    def __init__(self, sb: AsyncSandbox) -> None:
        self._sb = sb

    async def read(self, path: str) -> bytes:
        return (await self._sb._send(files_req("GET", self._sb.id, "", path, step=True)))[2]

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read(path)).decode(encoding)

    async def write(self, path: str, data: Union[bytes, str], mode: int = 0o644) -> FileInfo:
        if isinstance(data, str):
            data = data.encode()
        req = files_req("PUT", self._sb.id, "", path, query={"mode": f"{mode:04o}"},
                        body=bytes(data), ctype="application/octet-stream", step=True)
        return FileInfo.from_json(decode_json((await self._sb._send(req))[2]))

    async def list(self, path: str) -> List[FileInfo]:
        doc = decode_json((await self._sb._send(files_req("GET", self._sb.id, "/list", path)))[2])
        return [FileInfo.from_json(d) for d in (doc or {}).get("files") or []]

    async def stat(self, path: str) -> FileInfo:
        return FileInfo.from_json(decode_json((await self._sb._send(files_req("GET", self._sb.id, "/stat", path)))[2]))

    async def exists(self, path: str) -> bool:
        try:
            await self.stat(path)
            return True
        except NotFoundError:
            return False

    async def mkdir(self, path: str, parents: bool = True, mode: Optional[int] = None) -> None:
        body: Dict[str, Any] = {"path": path, "parents": parents}
        if mode:
            body["mode"] = mode
        await self._sb._send(Req("POST", sandbox_path(self._sb.id, "/files/mkdir"), json_body=body, step=True))

    async def remove(self, path: str, recursive: bool = False) -> None:
        q = {"recursive": "true"} if recursive else None
        await self._sb._send(files_req("DELETE", self._sb.id, "", path, query=q, step=True))

    async def upload(self, local: PathLike, remote_dir: str) -> None:
        data = await asyncio.get_running_loop().run_in_executor(None, make_tar, local)
        await self.upload_tar(data, remote_dir)

    async def upload_tar(self, data: bytes, remote_dir: str) -> None:
        req = files_req("PUT", self._sb.id, "/archive", remote_dir, body=data, ctype="application/x-tar", step=True)
        await self._sb._send(req)

    async def download_tar(self, remote_path: str) -> bytes:
        return (await self._sb._send(files_req("GET", self._sb.id, "/archive", remote_path)))[2]

    async def download(self, remote_path: str, local_dir: PathLike) -> None:
        data = await self.download_tar(remote_path)
        await asyncio.get_running_loop().run_in_executor(None, safe_extract, data, local_dir)


class AsyncProcess:
    """See :class:`dsec.Process`."""

    def __init__(self, sb: AsyncSandbox, info: ProcessInfo) -> None:
        self.sandbox = sb
        self.info = info
        self.id = info.id
        self.pid = info.pid

    def __repr__(self) -> str:
        return f"AsyncProcess({self.id!r}, pid={self.pid}, running={self.info.running})"

    @property
    def running(self) -> bool:
        return self.info.running

    @property
    def result(self) -> Optional[ExecResult]:
        return self.info.result

    async def refresh(self) -> "AsyncProcess":
        doc = await self.sandbox._json(Req("GET", process_path(self.sandbox.id, self.id), retry=True))
        self.info = ProcessInfo.from_json(doc)
        return self

    async def wait(self, timeout: Optional[Seconds] = None) -> ExecResult:
        t = _core.seconds(timeout)
        q = {"timeout_ms": str(max(1, int(t * 1000)))} if t is not None else None
        http_t = None if t is None or self.sandbox.client.timeout is None else self.sandbox.client.timeout + t
        req = Req("POST", process_path(self.sandbox.id, self.id, "/wait"), query=q, timeout=http_t)
        self.info = ProcessInfo.from_json(await self.sandbox._json(req))
        if self.info.running or self.info.result is None:
            raise TimeoutError(f"process {self.id} still running after {t}s")
        return self.info.result

    async def kill(self, signal: Union[str, int] = "SIGKILL") -> None:
        await self.sandbox._send(Req("POST", process_path(self.sandbox.id, self.id, "/kill"),
                                     json_body={"signal": str(signal)}))

    async def logs(self, stream: str = "stdout", offset: int = 0) -> bytes:
        req = Req("GET", process_path(self.sandbox.id, self.id, "/logs"),
                  query={"stream": stream, "offset": str(offset)}, retry=True)
        return (await self.sandbox._send(req))[2]


class AsyncExecStream:
    """A streaming exec; ``async for`` yields StreamChunk items then the ExecResult
    (also in ``.result``). Leaving the loop early closes the connection, which kills
    the process. ``await stream.signal("SIGTERM")`` signals it."""

    def __init__(self, client: AsyncClient, sid: str, body: Dict[str, Any], stdin: AStdin,
                 traj: Optional["AsyncTrajectory"] = None) -> None:
        self._client = client
        self._traj = traj
        self._step = 0
        self._sid = sid
        self._body = body
        self._stdin = stdin
        self._conn: Optional[AConn] = None
        self._feeder: Optional["asyncio.Task[None]"] = None
        self._wlock: Optional[asyncio.Lock] = None
        self._feed_failed = False
        self.result: Optional[ExecResult] = None
        self.pid: Optional[int] = None
        self.tty = bool(body.get("tty"))
        # Input lines the server refused (each an InvalidArgumentError), in order.
        self.input_errors: List[DsecError] = []
        # With a terminal and no stdin given, stdin stays open for write().
        self._stdin_closed = not (self.tty and stdin is None)
        self._started: Optional[AConn] = None

    async def _start(self) -> AConn:
        """Send the request head and line (once) and start the stdin feeder."""
        if self._started is not None:
            return self._started
        c = self._client
        conn = await c._pool.get()
        self._conn = conn
        self._started = conn
        self._wlock = asyncio.Lock()
        hdrs = dict(c._headers)
        hdrs["Content-Type"] = "application/x-ndjson"
        if self._traj is not None:
            self._step, th = self._traj._counter.begin()
            hdrs.update(th)
        head = build_head("POST", c._prefix + sandbox_path(self._sid, "/exec/stream"), c._host_hdr, hdrs, None)
        first = json.dumps(self._body, separators=(",", ":")).encode() + b"\n"
        conn.writer.write(head + _chunk(first))
        await conn.writer.drain()
        self._feeder = asyncio.ensure_future(self._feed())
        return conn

    async def _feed(self) -> None:
        try:
            await self._feed_lines()
        except (Exception, asyncio.CancelledError):  # noqa: BLE001 - the reader sees a broken stream
            self._feed_failed = True

    async def _feed_lines(self) -> None:
        stdin = self._stdin
        if not self._stdin_closed:
            return  # a terminal's stdin, typed into with write()
        if stdin is not None and hasattr(stdin, "__aiter__"):
            async for chunk in stdin:  # type: ignore[union-attr]
                if isinstance(chunk, str):
                    chunk = chunk.encode()
                for i in range(0, len(chunk), 48 << 10):
                    await self._write(_core.stdin_line(chunk[i : i + (48 << 10)]))
            await self._write(b'{"eof":true}\n')
        else:
            for line in _core.stream_input_lines(stdin):  # type: ignore[arg-type]
                await self._write(line)

    async def _write(self, data: bytes) -> None:
        conn = self._conn
        if conn is None or self._wlock is None:
            raise BrokenPipeError("exec stream closed")
        async with self._wlock:
            conn.writer.write(_chunk(data))
            await conn.writer.drain()

    async def signal(self, sig: Union[str, int] = "SIGTERM") -> None:
        await self._send_line(_core.signal_line(sig), "sending a signal")

    async def write(self, data: Union[str, bytes]) -> None:
        """Type data into the terminal (see :meth:`dsec.ExecStream.write`). Starts
        the request if the iteration has not yet."""
        if self._stdin_closed:
            raise InvalidArgumentError("exec stream: stdin is closed (write needs tty=True and no stdin argument)")
        b = _core.as_bytes(data)
        for i in range(0, len(b), 48 << 10):
            await self._send_line(_core.stdin_line(b[i : i + (48 << 10)]), "writing stdin")

    async def close_stdin(self) -> None:
        if not self._stdin_closed:
            self._stdin_closed = True
            await self._send_line(_core.EOF_LINE, "closing stdin")

    async def resize(self, cols: int, rows: int) -> None:
        """Set the terminal's size (``tty=True`` only); the program gets SIGWINCH."""
        if not self.tty:
            raise InvalidArgumentError("exec stream: resize needs a terminal (tty=True)")
        await self._send_line(_core.resize_line(cols, rows), "resizing the terminal")

    async def _send_line(self, line: bytes, what: str) -> None:
        try:
            if self._started is None:
                await self._start()
            await self._write(line)
        except OSError as e:
            raise network_error(e, f"exec stream: {what} failed") from e

    def __aiter__(self) -> AsyncIterator[Union[StreamChunk, ExecResult]]:
        return self._events()

    async def _events(self) -> AsyncIterator[Union[StreamChunk, ExecResult]]:
        finished = False
        try:
            try:
                try:
                    conn = await self._start()
                    status, h = await conn.read_head()
                    if status != 200:
                        data = await conn.read_body("POST", status, h)
                        raise error_from_response(status, data)
                    chunked = "chunked" in h.get("transfer-encoding", "").lower()
                except DsecError:
                    raise
                except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
                    raise network_error(e) from e
            except DsecError as e:
                if self._traj is not None:
                    self._traj._counter.end(self._step, e)
                raise
            if self._traj is not None:
                # Started on the server: logged, or left unknown if abandoned.
                self._traj._counter.end(self._step, None, h.get(REPLAYED_HEADER) == "true")
            buf = b""
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    try:
                        more = await conn.read_chunk() if chunked else await conn.reader.read(65536)
                    except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
                        raise InfrastructureError(f"exec stream broke: {type(e).__name__}: {e}",
                                                  retryable=False) from e
                    if not more:
                        raise InfrastructureError("exec stream ended before the exit event", retryable=False)
                    buf += more
                    continue
                line, buf = buf[:nl].strip(), buf[nl + 1 :]
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
                    finished = await self._finish(conn, chunked, buf)
                    yield self.result
                    return
                elif typ == "error":
                    raise error_from_response(200, json.dumps({"error": ev.get("error") or {}}).encode())
                elif typ == "input_error":
                    # A refused input line (bad size, unknown signal): the exec goes on.
                    self.input_errors.append(error_from_response(400, json.dumps({"error": ev.get("error") or {}}).encode()))
        finally:
            if not finished:
                self._abort()

    async def _finish(self, conn: AConn, chunked: bool, buf: bytes) -> bool:
        """End the request body and drain the response; pool the connection if both
        ended cleanly."""
        feeder = self._feeder
        if feeder is None:
            return False
        if not feeder.done():
            await asyncio.wait({feeder}, timeout=0.5)
        if not feeder.done() or self._feed_failed:
            return False
        try:
            async with self._wlock:  # type: ignore[union-attr]
                conn.writer.write(b"0\r\n\r\n")
                await conn.writer.drain()
            if not chunked or buf.strip():
                return False
            while await asyncio.wait_for(conn.read_chunk(), 30):
                pass
        except Exception:  # noqa: BLE001
            return False
        # Not pooled, like the sync client: the server may have left part of the
        # request body unread when the process exited early.
        self._conn = None
        conn.close()
        return True

    def _abort(self) -> None:
        if self._feeder is not None and not self._feeder.done():
            self._feeder.cancel()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def wait(self) -> ExecResult:
        async for _ in self:
            pass
        assert self.result is not None
        return self.result

    async def aclose(self) -> None:
        self._abort()

    async def __aenter__(self) -> "AsyncExecStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._abort()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class AsyncTrajectory:
    """See :class:`dsec.Trajectory` (same calls, awaited)."""

    def __init__(self, client: AsyncClient, traj_id: str, sandbox: Optional[AsyncSandbox] = None,
                 start: int = 1) -> None:
        self.client = client
        self.id = traj_id
        self._counter = StepCounter(traj_id, start)
        self._sb: Optional[AsyncSandbox] = self.sandbox(sandbox) if sandbox is not None else None

    def __repr__(self) -> str:
        return f"AsyncTrajectory({self.id!r}, next_step={self.next_step})"

    @property
    def next_step(self) -> int:
        return self._counter.next

    @next_step.setter
    def next_step(self, n: int) -> None:
        if n < 1:
            raise ValueError("steps start at 1")
        self._counter.next = int(n)

    @property
    def replayed_steps(self) -> int:
        return self._counter.replayed_steps

    @property
    def live_steps(self) -> int:
        return self._counter.live_steps

    @property
    def last_replayed(self) -> bool:
        return self._counter.last_replayed

    def sandbox(self, sb: Union[None, AsyncSandbox, str] = None) -> AsyncSandbox:
        if sb is None:
            if self._sb is None:
                raise ValueError("this trajectory has no bound sandbox: pass one")
            return self._sb
        info = sb.info if isinstance(sb, AsyncSandbox) else SandboxInfo(id=str(sb))
        view = AsyncSandbox(self.client, info)
        view.trajectory = self
        return view

    def _split(self, a: Tuple[Any, ...]) -> Tuple[AsyncSandbox, Tuple[Any, ...]]:
        if a and isinstance(a[0], AsyncSandbox):
            return self.sandbox(a[0]), a[1:]
        return self.sandbox(), a

    async def _step(self, req: Req, raw: bool) -> Tuple[int, Dict[str, str], bytes]:
        n, h = self._counter.begin()
        with_headers(req, h)
        try:
            status, headers, body = await self.client._send(req, raw)
        except DsecError as e:
            self._counter.end(n, e)
            raise
        err = error_from_response(status, body) if raw and status >= 300 and "x-dsec-error" in headers else None
        self._counter.end(n, err, headers.get(REPLAYED_HEADER) == "true")
        return status, headers, body

    async def exec(self, *a: Any, **kw: Any) -> ExecResult:
        sb, rest = self._split(a)
        return await sb.exec(*rest, **kw)

    def exec_stream(self, *a: Any, **kw: Any) -> AsyncExecStream:
        sb, rest = self._split(a)
        return sb.exec_stream(*rest, **kw)

    async def spawn(self, *a: Any, **kw: Any) -> "AsyncProcess":
        sb, rest = self._split(a)
        return await sb.spawn(*rest, **kw)

    async def http(self, *a: Any, **kw: Any) -> HTTPResponse:
        sb, rest = self._split(a)
        return await sb.http(*rest, **kw)

    @property
    def files(self) -> "AsyncFiles":
        return self.sandbox().files

    async def fncall(self, *a: Any, **kw: Any) -> FnCallResult:
        """See :meth:`dsec.Trajectory.fncall`."""
        req = Req("POST", "/v1/fncall", json_body=fncall_body(*a, **kw), retry=True,
                  timeout=fncall_http_timeout(self.client.timeout))
        return FnCallResult.from_json(decode_json((await self._step(req, False))[2]) or {})

    async def get(self) -> TrajectoryInfo:
        return TrajectoryInfo.from_json(await self.client._json(Req("GET", _traj_path(self.id), retry=True)) or {})

    async def steps(self) -> List[TrajectoryStep]:
        return (await self.get()).steps

    async def export(self) -> str:
        return (await self.client._send(Req("GET", _traj_path(self.id, "/export"), retry=True)))[2].decode()

    async def delete(self) -> None:
        await self.client._send(Req("DELETE", _traj_path(self.id), retry=True, gone_ok=True))

    async def rebuild(self) -> RebuildResult:
        doc = await self.client._json(Req("POST", _traj_path(self.id, "/rebuild"), timeout=None))
        res = RebuildResult.from_json(doc or {})
        if res.sandbox_id:
            self._sb = self.sandbox(res.sandbox_id)
        return res


def _traj_path(tid: str, rest: str = "") -> str:
    return "/v1/trajectories/" + _core.esc(tid) + rest

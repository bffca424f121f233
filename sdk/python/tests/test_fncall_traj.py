"""FnCall and the trajectory log against a real `dsec server`, with the sync and the
async client (every test runs twice, like test_api.py)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

import dsec
from conftest import server_available

pytestmark = pytest.mark.skipif(bool(server_available()), reason=server_available() or "ok")

C_SUM = "#include <stdio.h>\nint main(void){long a,b;scanf(\"%ld %ld\",&a,&b);printf(\"%ld\\n\",a+b);return 0;}\n"
PY_SUM = "a, b = map(int, input().split())\nprint(a + b)\n"
SUM_TESTS = [{"stdin": "1 2\n", "expected_output": "3\n"}, {"stdin": "40 2", "expected_output": "42"}]


# ---- FnCall ---------------------------------------------------------------------------


@pytest.mark.parametrize("lang,src", [("c", C_SUM), ("python3", PY_SUM)])
def test_fncall_accepted(client: Any, lang: str, src: str) -> None:
    r = client.fncall(language=lang, source=src, tests=SUM_TESTS, limits={"cpu_time_ms": 2000})
    assert r.verdict == "accepted", r
    assert r.accepted and r.passed == 2 and r.summary == {"accepted": 2}
    assert [t.stdout for t in r.tests] == ["3\n", "42\n"]
    assert all(t.wall_time_ms > 0 for t in r.tests)
    if lang == "c":
        assert r.compile is not None and r.compile.verdict == "accepted"


@pytest.mark.parametrize("lang,src", [("c", C_SUM.replace("a+b", "a-b")), ("python3", PY_SUM.replace("+", "-"))])
def test_fncall_wrong_answer(client: Any, lang: str, src: str) -> None:
    r = client.fncall(language=lang, files={"main." + ("c" if lang == "c" else "py"): src}, tests=SUM_TESTS)
    assert r.verdict == "wrong_answer", r
    assert r.summary == {"wrong_answer": 2}
    assert not r.accepted and r.tests[0].message


@pytest.mark.parametrize("lang,src", [("c", "int main(void){ return x; }\n"), ("python3", "def f(:\n")])
def test_fncall_compile_error(client: Any, lang: str, src: str) -> None:
    r = client.fncall(language=lang, source=src, tests=SUM_TESTS)
    if lang == "python3":
        # The server has no compile step for python3: a syntax error is a
        # runtime_error of every test, with the SyntaxError on stderr.
        assert r.verdict == "runtime_error" and r.compile is None, r
        assert "SyntaxError" in r.tests[0].stderr
        return
    assert r.verdict == "compile_error", r
    assert r.compile is not None and r.compile.verdict == "compile_error"
    assert r.tests == [] or all(t.verdict != "accepted" for t in r.tests)
    assert "x" in r.compile.output


def test_fncall_compare_and_cmd(client: Any) -> None:
    r = client.fncall(cmd=["/bin/sh", "-c", "echo 3.1415927"],
                      tests=[{"expected_output": "3.14159", "compare": {"mode": "float", "epsilon": 1e-3}}])
    assert r.verdict == "accepted", r
    with pytest.raises(dsec.InvalidArgumentError):
        client.fncall(language="cobol", files={"main.cob": "x"})


def test_fncall_batch(client: Any) -> None:
    calls = [
        {"language": "python3", "source": PY_SUM},
        {"language": "python3", "source": PY_SUM.replace("+", "*")},
        {"language": "c", "source": C_SUM},
        {"language": "c", "source": "int main(void){ return x; }\n"},
        {"language": "cobol", "files": {"main.cob": "x"}},  # the server refuses this one alone
    ]
    got = {r.index: r for r in client.fncall_batch(calls, tests=SUM_TESTS)}
    assert sorted(got) == [0, 1, 2, 3, 4]
    assert got[0].verdict == "accepted"
    assert got[1].verdict == "wrong_answer"
    assert got[2].verdict == "accepted"
    assert got[3].verdict == "compile_error"
    assert isinstance(got[4].error, dsec.InvalidArgumentError) and got[4].verdict == ""


# ---- trajectories ---------------------------------------------------------------------


def _steps(traj: Any, sb: Any, k: int) -> Any:
    r = traj.exec(sb, f"echo line{k} >> /tmp/traj.txt && wc -l < /tmp/traj.txt")
    return r


def test_trajectory_replay_resume(client: Any, sb: Any) -> None:
    tid = "pytest-" + os.urandom(6).hex()
    t1 = client.trajectory(tid)
    for k in range(1, 6):
        r = _steps(t1, sb, k)
        assert r.exit_code == 0 and not r.replayed and r.stdout.strip() == str(k)
    assert t1.next_step == 6 and t1.live_steps == 5

    # A resumed trainer: a new object for the same id re-issues the same calls.
    t2 = client.trajectory(tid, sandbox=sb)
    for k in range(1, 6):
        r = _steps(t2, sb, k)
        assert r.replayed and r.stdout.strip() == str(k)
    assert t2.replayed_steps == 5 and t2.last_replayed
    assert sb.files.read_text("/tmp/traj.txt").count("\n") == 5   # nothing ran twice
    r = t2.exec("echo line6 >> /tmp/traj.txt && wc -l < /tmp/traj.txt")   # bound sandbox
    assert not r.replayed and r.stdout.strip() == "6"
    assert t2.live_steps == 1 and not t2.last_replayed

    # Another resume that changes step 3 diverges, and the counter stays on it.
    t3 = client.trajectory(tid)
    view = t3.sandbox(sb)
    assert view.exec("echo line1 >> /tmp/traj.txt && wc -l < /tmp/traj.txt").replayed
    _steps(t3, sb, 2)
    with pytest.raises(dsec.TrajectoryDivergedError) as ei:
        t3.exec(sb, "echo something else")
    assert ei.value.status == 409 and not ei.value.retryable
    assert t3.next_step == 3

    info = t2.get()
    assert info.id == tid and info.last_step == 6 and info.sandbox_id == sb.id
    steps = t2.steps()
    assert [s.step for s in steps] == [1, 2, 3, 4, 5, 6]
    assert all(s.op == "exec" and s.state == "finished" for s in steps)
    assert steps[0].result["stdout"] == "1\n"
    lines = t2.export().splitlines()
    assert len(lines) == 6 and json.loads(lines[5])["step"] == 6
    assert tid in [t.id for t in client.trajectories()]

    t2.delete()
    with pytest.raises(dsec.NotFoundError):
        t2.get()
    with pytest.raises(dsec.NotFoundError):
        t2.delete()


def test_trajectory_fncall_steps(client: Any, sb: Any) -> None:
    """A FnCall is a step with no sandbox: a resumed trainer gets the logged verdict
    and output (a random number here: a re-run would print another) and goes on."""
    tid = "pytest-fc-" + os.urandom(6).hex()
    rnd = "import random; print(random.random())"
    t1 = client.trajectory(tid)
    first = t1.fncall(language="python3", source=rnd, tests=[{}])
    assert first.verdict == "accepted" and not t1.last_replayed
    t1.exec(sb, "echo ok")   # the first sandbox step binds the trajectory
    t2 = client.trajectory(tid)
    again = t2.fncall(language="python3", source=rnd, tests=[{}])
    assert t2.last_replayed and again.tests[0].stdout == first.tests[0].stdout
    assert t2.exec(sb, "echo ok").replayed
    live = t2.fncall(language="python3", source=rnd, tests=[{}])   # step 3 runs live
    assert not t2.last_replayed and live.tests[0].stdout != first.tests[0].stdout
    with pytest.raises(dsec.TrajectoryDivergedError):
        client.trajectory(tid).fncall(language="python3", source="print(2)", tests=[{}])
    steps = t2.steps()
    assert [s.op for s in steps] == ["fncall", "exec", "fncall"]
    assert t2.get().sandbox_id == sb.id
    t2.delete()


def test_trajectory_files_stream_http(client: Any, sb: Any) -> None:
    tid = "pytest-f-" + os.urandom(6).hex()

    def run(traj: Any) -> list:
        out = []
        traj.files.mkdir("/tmp/tf")
        out.append(traj.last_replayed)
        traj.files.write("/tmp/tf/a.txt", "hello\n")
        out.append(traj.files.read_text("/tmp/tf/a.txt"))
        res = [x for x in traj.exec_stream(["cat", "/tmp/tf/a.txt"]) if isinstance(x, dsec.ExecResult)][0]
        out.append(res.replayed)
        with pytest.raises(dsec.NotFoundError):   # a logged error: replayed too
            traj.files.read("/tmp/tf/missing")
        out.append(traj.next_step)
        return out

    a = run(client.trajectory(tid, sandbox=sb))
    assert a == [False, "hello\n", False, 6]
    b = run(client.trajectory(tid, sandbox=sb))
    assert b == [True, "hello\n", True, 6]
    assert [s.op for s in client.trajectory(tid).steps()] == [
        "mkdir", "write_file", "read_file", "exec_stream", "read_file"]
    client.trajectory(tid).delete()


def test_trajectory_sandbox_lost(client: Any) -> None:
    tid = "pytest-l-" + os.urandom(6).hex()
    s = client.create(memory="256m", ttl=600)
    traj = client.trajectory(tid, sandbox=s)
    try:
        assert traj.exec("echo a > /tmp/x").exit_code == 0
    finally:
        s.delete()
    assert client.trajectory(tid, sandbox=s).exec("echo a > /tmp/x").replayed   # replay needs no sandbox
    with pytest.raises(dsec.TrajectorySandboxLostError) as ei:
        traj.exec("cat /tmp/x")
    e = ei.value
    assert e.status == 410 and e.infrastructure and not e.retryable
    assert isinstance(e, dsec.InfrastructureError)
    assert traj.next_step == 2   # not logged: the same step may be re-issued
    rb = traj.rebuild()
    try:
        assert rb.old_sandbox_id == s.id and rb.sandbox_id != s.id and rb.reexecuted == 1
        r = traj.exec("cat /tmp/x")   # the bound sandbox is the new one
        assert r.stdout == "a\n" and not r.replayed
    finally:
        client.sandbox(rb.sandbox_id).delete()
        traj.delete()

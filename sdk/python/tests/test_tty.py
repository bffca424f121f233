"""Terminal (PTY) execs against a real server, sync and async alike: the program
sees a terminal of the size asked for, resizes arrive as SIGWINCH, Ctrl-C is a
byte that interrupts the foreground job, and bad sizes are refused."""

from __future__ import annotations

import re
from typing import Any, Iterator, Optional

import pytest

import dsec


class Term:
    """Reads a tty exec stream until expected output arrives. A stuck test ends
    when the exec's own timeout kills the program (the stream then ends)."""

    def __init__(self, st: Any) -> None:
        self.st = st
        self.it: Iterator[Any] = iter(st)
        self.out = b""
        self.result: Optional[dsec.ExecResult] = None

    def expect(self, pattern: bytes) -> "re.Match[bytes]":
        rx = re.compile(pattern)
        while True:
            m = rx.search(self.out)
            if m:
                self.out = self.out[m.end():]
                return m
            if self.result is not None:
                raise AssertionError(f"{pattern!r} never came; output {self.out!r}, {self.result}")
            item = next(self.it)
            if isinstance(item, dsec.ExecResult):
                self.result = item
            else:
                assert item.stream == "stdout", item  # a terminal has one stream
                self.out += item.data

    def wait(self) -> dsec.ExecResult:
        for item in self.it:
            if isinstance(item, dsec.ExecResult):
                self.result = item
            else:
                self.out += item.data
        assert self.result is not None
        return self.result


def test_tty_size_and_device(sb: Any) -> None:
    items = list(sb.exec_stream("tty; stty size; echo err >&2", tty=True, cols=100, rows=30, timeout=60))
    res = items[-1]
    assert isinstance(res, dsec.ExecResult) and res.exit_code == 0, res
    assert {c.stream for c in items[:-1]} == {"stdout"}
    out = b"".join(c.data for c in items[:-1])
    # The terminal turns "\n" into "\r\n"; stderr is on it too.
    assert re.fullmatch(rb"/dev/pts/\d+\r\n30 100\r\nerr\r\n", out), out
    # Default size without cols/rows.
    out = b"".join(c.data for c in sb.exec_stream("stty size", tty=True, timeout=60) if isinstance(c, dsec.StreamChunk))
    assert out == b"24 80\r\n"


def test_tty_resize_is_sigwinch(sb: Any) -> None:
    t = Term(sb.exec_stream("trap 'echo winch $(stty size)' WINCH; echo ready; while :; do sleep 0.05; done",
                            tty=True, cols=80, rows=24, timeout=60))
    t.expect(rb"ready\r\n")
    t.st.resize(132, 43)
    t.expect(rb"winch 43 132\r\n")
    t.st.resize(40, 10)
    t.expect(rb"winch 10 40\r\n")
    t.st.write(b"\x03")  # Ctrl-C: SIGINT to the foreground group, here the script
    res = t.wait()
    assert res.signal == "SIGINT" or res.exit_code == 130, res


def test_tty_ctrl_c_interrupts_the_job_not_the_shell(sb: Any) -> None:
    t = Term(sb.exec_stream(["sh", "-i"], tty=True, timeout=60, env={"PS1": "$ "}))
    t.expect(rb"\$ ")
    t.st.write(b"sleep 100\r")
    t.expect(rb"sleep 100\r\n")  # the terminal's echo: the line was read
    # ^C goes to the terminal's foreground job: wait until that is sleep (it
    # runs sleep once exec'd; typed earlier, the shell itself would get it).
    wait_sleep = "for i in $(seq 200); do for p in /proc/[0-9]*; do " \
        "[ \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" = 'sleep 100 ' ] && exit 0; done; sleep 0.05; done; exit 1"
    assert sb.exec(wait_sleep).exit_code == 0
    t.st.write(b"\x03")
    t.expect(rb"\$ ")  # a new prompt: sleep ended, the shell lives
    t.st.write(b"echo alive $((6*7))\r")
    t.expect(rb"alive 42\r\n")
    t.st.write(b"exit 3\r")
    assert t.wait().exit_code == 3


def test_tty_python_repl(sb: Any) -> None:
    t = Term(sb.exec_stream(["python3", "-i", "-q"], tty=True, cols=120, rows=40, timeout=60))
    t.expect(rb">>> ")
    t.st.write(b"import os; os.get_terminal_size()\r")
    t.expect(rb"os.terminal_size\(columns=120, lines=40\)\r\n>>> ")
    t.st.write(b"6*7\r")
    t.expect(rb"\r\n42\r\n>>> ")
    t.st.write(b"\x04")  # Ctrl-D at the prompt: end of input, the REPL exits
    assert t.wait().exit_code == 0


def test_tty_spawn(sb: Any) -> None:
    p = sb.spawn("tty; stty size; echo e >&2", tty=True, cols=90, rows=20)
    r = p.wait(30)
    assert r.exit_code == 0, r
    assert re.fullmatch(rb"/dev/pts/\d+\r\n20 90\r\ne\r\n", p.logs()), p.logs()
    assert p.logs("stderr") == b""


def test_tty_bad_input(sb: Any) -> None:
    st = sb.exec_stream("cat", timeout=60)
    with pytest.raises(dsec.InvalidArgumentError):
        st.resize(80, 24)  # no terminal: refused before anything is sent
    st.close() if hasattr(st, "close") else st.aclose()
    with pytest.raises(dsec.InvalidArgumentError):
        sb.exec_stream("true", cols=80)  # a size without tty
    for cols, rows in ((100000, 24), (80, 1001), (-1, 24)):
        with pytest.raises(dsec.InvalidArgumentError) as ei:
            list(sb.exec_stream("true", tty=True, cols=cols, rows=rows, timeout=60))
        assert ei.value.status == 400, ei.value
    with pytest.raises(dsec.InvalidArgumentError):
        sb.spawn("true", tty=True, cols=100000)
    # A zero or huge size in a resize, or an unknown signal, is refused (an
    # input_error the stream keeps) and the exec goes on ...
    t = Term(sb.exec_stream("echo ready; exec cat", tty=True, timeout=60))
    t.expect(rb"ready")
    t.st.resize(0, 0)
    t.st.resize(1001, 24)
    t.st.signal("SIGNOPE")
    t.st.write(b"after\r")
    t.expect(rb"after\r\n")
    errs = t.st.input_errors
    assert [type(e) for e in errs] == [dsec.InvalidArgumentError] * 3, errs
    assert all(e.status == 400 and e.message for e in errs), errs
    t.st.write(b"\x03")
    t.wait()
    # ... and nothing else is disturbed: the sandbox still answers.
    assert sb.exec("echo ok").stdout == "ok\n"


def test_tty_close_stdin_is_end_of_input(sb: Any) -> None:
    t = Term(sb.exec_stream("cat; echo cat-done", tty=True, timeout=60))
    t.st.write(b"one\r")
    t.expect(rb"one\r\none\r\n")  # the terminal's echo, then cat's copy
    t.st.close_stdin()  # ^D on the terminal: cat sees the end of its input
    t.expect(rb"cat-done\r\n")
    assert t.wait().exit_code == 0

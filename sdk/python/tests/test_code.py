"""Sandbox.run_code against a real `dsec server`: the code interpreter of a
code-interpreter-v1 sandbox through /v1 code:run, with the sync and the asyncio
client. Needs the code-interpreter-v1 image (scripts/codeint-image.sh)."""

from __future__ import annotations

import os
import re
import time
from typing import Any

import pytest

import dsec
from conftest import server_available

IMAGE = "code-interpreter-v1"
PNG = "iVBORw0KGgo"  # base64 of the PNG signature

pytestmark = [
    pytest.mark.skipif(bool(server_available()), reason=server_available() or "ok"),
    pytest.mark.skipif(not os.path.isdir(f"/var/lib/dsec/images/{IMAGE}"),
                       reason=f"the {IMAGE} image is not built (scripts/codeint-image.sh)"),
]


def test_run_code(client: Any) -> None:
    sb = client.create(image=IMAGE, ttl=600)
    try:
        out: list = []
        ex = sb.run_code("x = 41\nprint('hi')\nx + 1", on_stdout=out.append)
        assert ex.text == "42"
        assert ex.stdout == ["hi\n"] and out == ["hi\n"]
        assert ex.execution_count == 1 and ex.error is None
        assert sb.run_code("x").text == "41", "variables persist between cells"

        err = sb.run_code("def f():\n    return 1 / 0\nf()")
        assert err.error is not None and err.error.name == "ZeroDivisionError"
        # IPython's traceback, colored with ANSI escapes as Jupyter gives it.
        assert "return 1 / 0" in re.sub(r"\x1b\[[0-9;]*m", "", err.error.traceback)

        results: list = []
        plot = sb.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2], [2, 1])\nplt.show()",
                           on_result=results.append)
        assert len(results) == 1 and results[0].png.startswith(PNG) and not results[0].is_main_result

        assert sb.run_code("import os; os.environ.get('FOO')", env={"FOO": "bar"}).text == "bar"
        assert sb.run_code("import os; os.environ.get('FOO', 'unset')").text == "unset", "env is per cell"

        js = sb.run_code("const a: number = 21; a * 2", language="typescript")
        assert js.text == "42"
        assert sb.run_code("echo $HOME-$0", language="bash").stdout == ["/root-bash\n"]

        t0 = time.monotonic()
        slow = sb.run_code("import time; time.sleep(120)", timeout=2)
        assert slow.error is not None and slow.error.name == "TimeoutError"
        assert time.monotonic() - t0 < 30
        assert sb.run_code("x + 1").text == "42", "the kernel was interrupted, its state kept"

        with pytest.raises(dsec.InvalidArgumentError, match="cobol"):
            sb.run_code("1", language="cobol")
        with pytest.raises(dsec.NotFoundError):
            sb.run_code("1", context="no-such-context")
        with pytest.raises(ValueError):
            sb.run_code("1", language="python", context="c")
    finally:
        sb.delete()


def test_run_code_errors(client: Any) -> None:
    with pytest.raises(dsec.NotFoundError):
        client.sandbox("no-such-sandbox").run_code("1")
    sb = client.create(image="busybox", ttl=120)
    try:
        # No python3 in the image: a clear error, not a hang.
        with pytest.raises(dsec.InfrastructureError, match="code-interpreter"):
            sb.run_code("1")
    finally:
        sb.delete()


def test_code_contexts(client: Any) -> None:
    sb = client.create(image=IMAGE, ttl=600)
    try:
        listed = sb.list_code_contexts()
        assert {"python", "javascript"} <= {c.language for c in listed}, listed
        assert sb.run_code("x = 1").error is None

        ctx = sb.create_code_context(cwd="/tmp")
        assert ctx.language == "python" and ctx.cwd == "/tmp" and ctx.id
        assert ctx.id in [c.id for c in sb.list_code_contexts()]
        isolated = sb.run_code("x", context=ctx)
        assert isolated.error is not None and isolated.error.name == "NameError", "a context has its own kernel"
        assert sb.run_code("import os; os.getcwd()", context=ctx).text == "/tmp"
        sb.run_code("y = 5", context=ctx.id)
        sb.restart_code_context(ctx)
        restarted = sb.run_code("y", context=ctx)
        assert restarted.error is not None and restarted.error.name == "NameError", "a restart forgets"
        assert sb.run_code("x").text == "1", "the default context kept its state"

        java = sb.create_code_context(language="java")
        assert java.language == "java" and java.cwd == "/home/user"
        sb.run_code("int n = 20;", context=java)
        assert sb.run_code("n * 2 + 2", context=java).text == "42"
        assert sb.run_code('System.getProperty("K")', context=java, env={"K": "v"}).text == "v"

        sb.remove_code_context(ctx)
        assert ctx.id not in [c.id for c in sb.list_code_contexts()]
        with pytest.raises(dsec.NotFoundError):
            sb.run_code("1", context=ctx)
        with pytest.raises(dsec.NotFoundError):
            sb.restart_code_context(ctx)
        with pytest.raises(dsec.NotFoundError):
            sb.remove_code_context(ctx.id)
        with pytest.raises(dsec.InvalidArgumentError, match="cobol"):
            sb.create_code_context(language="cobol")
        with pytest.raises(dsec.InvalidArgumentError, match="not a directory"):
            sb.create_code_context(cwd="/nonexistent")
    finally:
        sb.delete()

"""dsec.harness.harbor against Harbor's published environment interface
(``harbor.environments.base.BaseEnvironment``, ``ExecResult``; the factory's
``create_environment_from_import_path``), and driven against a real dsec server
as a Harbor trial drives its environment: start, the agent's and the
verifier's commands, files both ways, stop. Harbor is not installed here; its
interface is written out below from its source."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import types
from pathlib import Path
from typing import Any, Dict

import pytest

import dsec
from dsec._core import Req
from dsec.harness import harbor

P = inspect.Parameter


def params(fn: Any) -> list:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values() if p.name != "self"]


def test_harbor_interface() -> None:
    env = harbor.DsecEnvironment
    # async start(self, force_build: bool) -> None; async stop(self, delete: bool)
    assert params(env.start) == [("force_build", P.POSITIONAL_OR_KEYWORD, P.empty)]
    assert params(env.stop) == [("delete", P.POSITIONAL_OR_KEYWORD, P.empty)]
    # async exec(self, command, cwd=None, env=None, timeout_sec=None, user=None) -> ExecResult
    assert params(env.exec) == [("command", P.POSITIONAL_OR_KEYWORD, P.empty), ("cwd", P.POSITIONAL_OR_KEYWORD, None),
                                ("env", P.POSITIONAL_OR_KEYWORD, None), ("timeout_sec", P.POSITIONAL_OR_KEYWORD, None),
                                ("user", P.POSITIONAL_OR_KEYWORD, None)]
    # upload_file(source_path, target_path), upload_dir(source_dir, target_dir),
    # download_file(source_path, target_path), download_dir(source_dir, target_dir)
    for name, args in [("upload_file", ["source_path", "target_path"]), ("upload_dir", ["source_dir", "target_dir"]),
                       ("download_file", ["source_path", "target_path"]),
                       ("download_dir", ["source_dir", "target_dir"])]:
        assert [n for n, _, _ in params(getattr(env, name))] == args, name
    # is_dir(self, path, user=None) -> bool; is_file likewise
    for m in (env.is_dir, env.is_file):
        assert params(m) == [("path", P.POSITIONAL_OR_KEYWORD, P.empty), ("user", P.POSITIONAL_OR_KEYWORD, None)]
    for name in ("start", "stop", "exec", "upload_file", "upload_dir", "download_file", "download_dir", "is_dir",
                 "is_file", "apply_network_policy", "run_healthcheck", "prepare_logs_for_host", "attach"):
        assert inspect.iscoroutinefunction(getattr(env, name)), name
    # type() is a static method whose answer has a value; the capabilities are properties.
    assert env.type().value == "dsec"
    for prop in ("is_mounted", "supports_gpus", "can_disable_internet", "supports_dynamic_network_policy"):
        assert isinstance(inspect.getattr_static(env, prop), property), prop
    # Built by keyword with BaseEnvironment's arguments, the environment kwargs after them.
    init = [n for n, _, _ in params(env.__init__)]
    assert init[:6] == ["environment_dir", "environment_name", "session_id", "trial_paths", "task_env_config", "logger"]
    r = harbor.ExecResult(stdout="a", stderr=None, return_code=3)
    assert (r.stdout, r.stderr, r.return_code) == ("a", None, 3)


def task_config(**kw: Any) -> Any:
    """A task's [environment] table as Harbor's EnvironmentConfig carries it."""
    d: Dict[str, Any] = dict(docker_image=None, build_timeout_sec=600.0, cpus=1, memory_mb=512, storage_mb=None,
                             gpus=0, env={}, network_mode="public", allowed_hosts=None, healthcheck=None)
    d.update(kw)
    return types.SimpleNamespace(**d)


def make_env(server: Any, tmp_path: Path, cfg: Any, **kwargs: Any) -> Any:
    """As Harbor's EnvironmentFactory.create_environment_from_import_path builds one."""
    module, cls = "dsec.harness.harbor:DsecEnvironment".split(":", 1)
    trial = tmp_path / "trial"
    paths = types.SimpleNamespace(trial_dir=trial, agent_dir=trial / "agent", verifier_dir=trial / "verifier")
    return getattr(importlib.import_module(module), cls)(
        environment_dir=tmp_path / "environment", environment_name="hello-world", session_id="hello-world__abc123",
        trial_paths=paths, task_env_config=cfg, logger=None,
        dsec_addr=server.addr, dsec_token=server.token, **kwargs)


def test_harbor_trial(server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARBOR_TEST_SECRET", "s3cret")
    cfg = task_config(docker_image="debian", network_mode="no-network",
                      env={"API_KEY": "${HARBOR_TEST_SECRET}", "MODE": "${HARBOR_TEST_UNSET:-fallback}"})
    env = make_env(server, tmp_path, cfg)

    async def trial() -> None:
        await env.start(force_build=False)
        sid = env.sandbox.id
        info = (await env.client.get(sid)).info
        assert info.memory_bytes == 512 << 20 and not info.network
        assert await env.is_dir("/logs/agent") and await env.is_dir("/logs/verifier")
        # Commands: bash, the task's env resolved from the host, cwd, user.
        r = await env.exec("echo $API_KEY $MODE $EXTRA; pwd; echo err >&2", cwd="/tmp", env={"EXTRA": "x"})
        assert (r.return_code, r.stdout, r.stderr) == (0, "s3cret fallback x\n/tmp\n", "err\n")
        assert (await env.exec("id -u", user=1000)).stdout == "1000\n"
        env.default_user = "nobody"
        assert (await env.exec("id -un")).stdout == "nobody\n"
        env.default_user = None
        # The task's failure is the return code.
        r = await env.exec("ls /nonexistent")
        assert r.return_code == 2 and "nonexistent" in r.stderr and r.stdout is None
        # A timeout raises, as Harbor's environments do.
        with pytest.raises(harbor.CommandTimeoutError, match="Command timed out after 1 seconds"):
            await env.exec("sleep 30", timeout_sec=1)
        # Files in: a file (its directory made), a directory's contents.
        src = tmp_path / "up"
        (src / "sub").mkdir(parents=True)
        (src / "a.txt").write_text("A")
        (src / "sub" / "b.txt").write_text("B")
        (tmp_path / "run.sh").write_text("#!/bin/bash\necho ran\n")
        os.chmod(tmp_path / "run.sh", 0o755)
        await env.upload_file(tmp_path / "run.sh", "/tests/run.sh")
        await env.upload_dir(src, "/solution")
        r = await env.exec("/tests/run.sh && cat /solution/a.txt /solution/sub/b.txt")
        assert r.stdout == "ran\nAB"
        assert await env.is_file("/tests/run.sh") and not await env.is_file("/tests")
        assert not await env.is_dir("/nonexistent")
        # Files out: the verifier's reward file, the agent's log directory.
        await env.exec("echo 1 > /logs/verifier/reward.txt; mkdir -p /logs/agent/x; echo log > /logs/agent/x/l.txt")
        await env.download_file("/logs/verifier/reward.txt", tmp_path / "trial" / "verifier" / "reward.txt")
        assert (tmp_path / "trial" / "verifier" / "reward.txt").read_text() == "1\n"
        (tmp_path / "trial" / "agent").mkdir(parents=True)
        (tmp_path / "trial" / "agent" / "old.txt").write_text("kept")
        await env.download_dir("/logs/agent", tmp_path / "trial" / "agent")
        assert (tmp_path / "trial" / "agent" / "x" / "l.txt").read_text() == "log\n"
        assert (tmp_path / "trial" / "agent" / "old.txt").read_text() == "kept"
        await env.stop(delete=True)
        with pytest.raises(dsec.NotFoundError):
            async with dsec.aio.AsyncClient(server.addr, server.token) as c:
                await c.get(sid)

    asyncio.run(trial())


def test_harbor_dockerfile_and_network(server: Any, tmp_path: Path) -> None:
    envdir = tmp_path / "environment"
    envdir.mkdir()
    (envdir / "Dockerfile").write_text("FROM debian\nRUN echo built > /built\nWORKDIR /app\n")
    (envdir / "data.txt").write_text("context file\n")
    with open(envdir / "Dockerfile", "a") as f:
        f.write("COPY data.txt /app/\n")
    env = make_env(server, tmp_path, task_config(network_mode="allowlist", allowed_hosts=["pypi.org", "10.9.0.0/16"]))

    async def trial() -> None:
        await env.start(force_build=True)
        try:
            r = await env.exec("cat /built data.txt; pwd")
            assert r.stdout == "built\ncontext file\n/app\n", r
            doc = await env.client._json(Req("GET", f"/v1/sandboxes/{env.sandbox.id}"))
            assert doc["network"]["allow_domains"] == ["pypi.org"] and doc["network"]["allow"] == ["10.9.0.0/16"], doc
            # A later phase without network (Harbor's dynamic network policy).
            await env.apply_network_policy(types.SimpleNamespace(network_mode="no-network", allowed_hosts=[]))
            doc = await env.client._json(Req("GET", f"/v1/sandboxes/{env.sandbox.id}"))
            assert not doc["network"].get("allow") and not doc["network"].get("allow_domains"), doc
        finally:
            await env.stop(delete=True)

    asyncio.run(trial())


def test_harbor_definition_and_infrastructure_errors(server: Any, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):  # neither a Dockerfile nor docker_image
        make_env(server, tmp_path, task_config())
    with pytest.raises(RuntimeError, match="GPU"):
        make_env(server, tmp_path, task_config(docker_image="debian", gpus=1))
    env = make_env(server, tmp_path, task_config(docker_image="debian"))

    async def trial() -> None:
        await env.start(force_build=False)
        async with dsec.aio.AsyncClient(server.addr, server.token) as c:
            await (await c.get(env.sandbox.id)).delete()  # the sandbox is gone under the trial
        with pytest.raises(dsec.DsecError) as ei:
            await env.exec("true")
        assert not isinstance(ei.value, harbor.CommandTimeoutError)
        await env.stop(delete=True)  # already gone: fine

    asyncio.run(trial())

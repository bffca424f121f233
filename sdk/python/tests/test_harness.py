"""The harness adapters (dsec.harness): their methods against the harnesses'
published interfaces, and driven against a real dsec server as each harness
drives an environment or a tool. The harnesses are not installed here, so the
interfaces are written out below from their documentation and source:
mini-swe-agent 2.x (``minisweagent.Environment``, ``environments/__init__.py``
``get_environment``) and verl 0.8.0.dev (``verl/tools/base_tool.py``,
``verl/tools/utils/tool_registry.py``)."""

from __future__ import annotations

import asyncio
import copy
import importlib
import inspect
import socket
from typing import Any, Dict

import pytest

import dsec
from dsec.harness import minisweagent as mswea
from dsec.harness import verl as verltool

P = inspect.Parameter


def params(fn: Any) -> list:
    """(name, kind, default) of a method's parameters, self left out."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values() if p.name != "self"]


# ---- mini-swe-agent ------------------------------------------------------------------


def test_minisweagent_interface() -> None:
    env = mswea.DsecEnvironment
    # execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]
    assert params(env.execute) == [("action", P.POSITIONAL_OR_KEYWORD, P.empty), ("cwd", P.POSITIONAL_OR_KEYWORD, ""),
                                   ("timeout", P.KEYWORD_ONLY, None)]
    # get_template_vars(self, **kwargs) -> dict[str, Any]; serialize(self) -> dict; cleanup(self)
    assert params(env.get_template_vars) == [("kwargs", P.VAR_KEYWORD, P.empty)]
    assert params(env.serialize) == [] and params(env.cleanup) == []
    # Built by get_environment as cls(**config): keyword arguments only, config_class among them.
    init = params(env.__init__)
    assert all(kind in (P.KEYWORD_ONLY, P.VAR_KEYWORD) for _, kind, _ in init)
    assert ("config_class", P.KEYWORD_ONLY, mswea.DsecEnvironmentConfig) in init
    for name in ("execute", "get_template_vars", "serialize", "cleanup"):
        assert not inspect.iscoroutinefunction(getattr(env, name)), name  # mini-swe-agent is synchronous


def get_environment(config: Dict[str, Any]) -> Any:
    """mini-swe-agent's get_environment: the class by its path, built from the rest."""
    config = copy.deepcopy(config)
    module, cls = config.pop("environment_class").rsplit(".", 1)
    return getattr(importlib.import_module(module), cls)(**config)


@pytest.fixture
def msenv(server: Any) -> Any:
    env = get_environment({"environment_class": "dsec.harness.minisweagent.DsecEnvironment",
                           "dsec_addr": server.addr, "dsec_token": server.token, "memory": "256m",
                           "cwd": "/tmp", "timeout": 20, "env": {"GREETING": "hi"}, "ttl": 600})
    yield env
    env.cleanup()


def test_minisweagent_execute(msenv: Any, server: Any) -> None:
    out = msenv.execute({"command": "echo $GREETING; pwd; echo oops >&2"})
    assert out == {"output": "hi\n/tmp\noops\n", "returncode": 0, "exception_info": ""}
    # State persists between actions; cwd per call.
    assert msenv.execute({"command": "mkdir -p /tmp/w && echo 42 > /tmp/w/f"})["returncode"] == 0
    assert msenv.execute({"command": "cat f"}, cwd="/tmp/w")["output"] == "42\n"
    # The task's own failure: the exit status, no exception.
    out = msenv.execute({"command": "ls /nonexistent"})
    assert out["returncode"] == 2 and "nonexistent" in out["output"] and out["exception_info"] == ""
    # A timeout: an observation with returncode -1, the partial output, TimeoutExpired.
    out = msenv.execute({"command": "echo started; sleep 30"}, timeout=1)
    assert out["returncode"] == -1 and out["output"] == "started\n"
    assert "timed out" in out["exception_info"] and out["extra"]["exception_type"] == "TimeoutExpired"
    # The submission marker (exit 0) ends the task with the rest as the submission.
    with pytest.raises(mswea.Submitted) as ei:
        msenv.execute({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo the patch"})
    assert ei.value.messages[0]["extra"] == {"exit_status": "Submitted", "submission": "the patch\n"}
    # Not with a non-zero exit.
    assert msenv.execute({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; exit 1"})["returncode"] == 1
    tv = msenv.get_template_vars(task="fix it")
    assert tv["cwd"] == "/tmp" and tv["task"] == "fix it" and "system" in tv and "dsec_token" not in tv
    ser = msenv.serialize()["info"]["config"]
    assert ser["environment_type"] == "dsec.harness.minisweagent.DsecEnvironment" and ser["environment"]["timeout"] == 20


def test_minisweagent_infrastructure_errors_raise(server: Any) -> None:
    env = get_environment({"environment_class": "dsec.harness.minisweagent.DsecEnvironment",
                           "dsec_addr": server.addr, "dsec_token": server.token, "ttl": 600})
    sid = env.sandbox.id
    dsec.Client(server.addr, server.token).get(sid).delete()  # the sandbox is gone under the agent
    with pytest.raises(dsec.DsecError):
        env.execute({"command": "true"})
    env.cleanup()
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(dsec.DsecError) as ei:
        get_environment({"environment_class": "dsec.harness.minisweagent.DsecEnvironment", "dsec_addr": dead,
                         "dsec_token": "x"})
    assert ei.value.infrastructure


def test_minisweagent_cleanup_deletes_the_sandbox(server: Any) -> None:
    env = get_environment({"environment_class": "dsec.harness.minisweagent.DsecEnvironment",
                           "dsec_addr": server.addr, "dsec_token": server.token, "ttl": 600})
    sid = env.sandbox.id
    env.cleanup()
    env.cleanup()  # twice is fine
    with pytest.raises(dsec.NotFoundError):
        dsec.Client(server.addr, server.token).get(sid)


# ---- verl ----------------------------------------------------------------------------


def test_verl_interface() -> None:
    tool = verltool.DsecSandboxTool
    # __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema)
    assert [n for n, _, _ in params(tool.__init__)] == ["config", "tool_schema"]
    # async create(self, instance_id: Optional[str] = None, **kwargs) -> tuple[str, ToolResponse]
    assert params(tool.create) == [("instance_id", P.POSITIONAL_OR_KEYWORD, None), ("kwargs", P.VAR_KEYWORD, P.empty)]
    # async execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]
    assert params(tool.execute) == [("instance_id", P.POSITIONAL_OR_KEYWORD, P.empty),
                                    ("parameters", P.POSITIONAL_OR_KEYWORD, P.empty), ("kwargs", P.VAR_KEYWORD, P.empty)]
    # async calc_reward(self, instance_id: str, **kwargs) -> float; async release(self, instance_id: str, **kwargs)
    for m in (tool.calc_reward, tool.release):
        assert params(m) == [("instance_id", P.POSITIONAL_OR_KEYWORD, P.empty), ("kwargs", P.VAR_KEYWORD, P.empty)]
    for name in ("create", "execute", "calc_reward", "release"):
        assert inspect.iscoroutinefunction(getattr(tool, name)), name
    # The default schema is an OpenAI function tool schema.
    assert verltool.DEFAULT_SCHEMA["type"] == "function" and verltool.DEFAULT_SCHEMA["function"]["name"] == "sandbox"


def make_tool(server: Any, **config: Any) -> Any:
    """As verl's tool registry builds a native tool: the class by its path, then cls(config=..., tool_schema=...)."""
    module, cls = "dsec.harness.verl.DsecSandboxTool".rsplit(".", 1)
    return getattr(importlib.import_module(module), cls)(
        config={"type": "native", "dsec_addr": server.addr, "dsec_token": server.token, "memory": "256m", "ttl": 600,
                **config},
        tool_schema=None)


def test_verl_tool_trajectory(server: Any) -> None:
    async def trajectory() -> None:
        tool = make_tool(server, default_timeout=20, reward_command="test \"$(cat answer)\" = 42")
        iid, resp = await tool.create(create_kwargs={})
        assert isinstance(iid, str) and resp.is_empty()
        resp, reward, metrics = await tool.execute(iid, {"command": "echo 6 > six; echo ok"}, agent_data=None)
        assert resp.text == "ok\n" and reward == 0.0 and metrics["exit_code"] == 0
        # The instance's sandbox keeps its files: the Python program reads them.
        resp, _, _ = await tool.execute(iid, {"code": "print(int(open('six').read()) * 7)"})
        assert resp.text == "42\n"
        assert await tool.calc_reward(iid) == 0.0
        await tool.execute(iid, {"code": "open('answer', 'w').write('42')"})
        assert await tool.calc_reward(iid) == 1.0
        # The task's failures are in the text and the metrics.
        resp, reward, metrics = await tool.execute(iid, {"code": "raise SystemExit('bad input')"})
        assert "bad input" in resp.text and "[exit code 1]" in resp.text and metrics["exit_code"] == 1
        resp, _, metrics = await tool.execute(iid, {"command": "echo started; sleep 30", "timeout": 1})
        assert resp.text.startswith("started\n") and "[timed out after 1 s]" in resp.text and metrics["timed_out"]
        # Two instances, two sandboxes.
        other, _ = await tool.create()
        resp, _, metrics = await tool.execute(other, {"command": "cat six"})
        assert metrics["exit_code"] == 1
        sb = tool._instances[iid]["sandbox"]
        await tool.release(iid)
        await tool.release(other)
        with pytest.raises(dsec.NotFoundError):
            await tool.client.get(sb.id)

    asyncio.run(trajectory())


def test_verl_tool_per_trajectory(server: Any) -> None:
    class AgentData:  # what verl's ToolAgentLoop passes as agent_data: the trajectory's request_id
        def __init__(self, request_id: str) -> None:
            self.request_id = request_id

    async def call(tool: Any, agent_data: Any, args: Dict[str, Any]) -> Any:
        """One tool call as ToolAgentLoop._call_tool makes it: create, execute, release."""
        iid, _ = await tool.create(create_kwargs={})
        try:
            return await tool.execute(iid, args, agent_data=agent_data)
        finally:
            await tool.release(iid)

    async def run() -> None:
        tool = make_tool(server, per_trajectory=True, idle_timeout=120)
        a, b = AgentData("traj-a"), AgentData("traj-b")
        await call(tool, a, {"command": "echo from-a > note"})
        resp, _, _ = await call(tool, a, {"command": "cat note"})
        assert resp.text == "from-a\n"  # the trajectory's sandbox outlives each call's instance
        resp, _, metrics = await call(tool, b, {"command": "cat note"})
        assert metrics["exit_code"] == 1  # another trajectory, another sandbox
        sa = tool._trajectories["traj-a"]
        assert sa.id != tool._trajectories["traj-b"].id
        info = await tool.client.get(sa.id)  # kept by release; dsec deletes it when idle
        assert info.id == sa.id
        # Without per_trajectory each call has its own sandbox.
        plain = make_tool(server)
        await call(plain, a, {"command": "echo x > note"})
        resp, _, metrics = await call(plain, a, {"command": "cat note"})
        assert metrics["exit_code"] == 1
        for sb in tool._trajectories.values():
            await sb.delete()

    asyncio.run(run())


def test_verl_infrastructure_errors_raise(server: Any) -> None:
    async def run() -> None:
        tool = make_tool(server)
        iid, _ = await tool.create()
        await tool.execute(iid, {"command": "true"})
        await tool._instances[iid]["sandbox"].delete()  # the sandbox is gone under the trajectory
        with pytest.raises(dsec.DsecError):
            await tool.execute(iid, {"command": "true"})
        await tool.release(iid)

    asyncio.run(run())

"""A verl stateful tool backed by a dsec sandbox, one sandbox per tool instance.

One entry in a verl tool config (``actor_rollout_ref.rollout.multi_turn.tool_config_path``)::

    tools:
      - class_name: dsec.harness.verl.DsecSandboxTool
        config: {type: native, image: debian, default_timeout: 30}

It follows verl's ``verl.tools.base_tool.BaseTool`` as of verl 0.8.0.dev (its
``BaseTool`` when verl is installed): ``__init__(config, tool_schema)``, and the
coroutines ``create(instance_id=None, **kwargs) -> (instance_id, ToolResponse)``,
``execute(instance_id, parameters, **kwargs) -> (ToolResponse, reward, metrics)``,
``calc_reward(instance_id, **kwargs) -> float`` and ``release(instance_id, **kwargs)``.
Each instance gets its own sandbox at its first ``execute`` (files and processes
stay between calls of the instance) and loses it at ``release``. verl's
``ToolAgentLoop`` (0.8.0.dev) creates and releases an instance around every
call; with ``per_trajectory: true`` the sandbox belongs to the trajectory
instead (``agent_data.request_id``, which that loop passes to ``execute``): its
calls share it, ``release`` leaves it, and dsec deletes it once it has been
idle for ``idle_timeout`` seconds (default 600). The tool's
arguments are ``command`` (a shell command) or ``code`` (a Python program),
with an optional ``timeout`` in seconds.

Outcomes, the way verl's SandboxFusion tool reports them: the text is stdout then
stderr; a non-zero exit adds ``exit code N`` to the text and to the metrics, a
timeout adds ``timed out after N s`` (the task's own outcomes, shown to the
model, step reward 0); a dsec failure (server unreachable, sandbox gone) raises
:class:`dsec.DsecError`, which verl's tool loop turns into its "Error when
executing tool" response. ``calc_reward`` runs ``config.reward_command`` in the
instance's sandbox when set: 1.0 when it exits 0, else 0.0.
"""

from __future__ import annotations

import uuid
from typing import Any, Dict, Optional, Tuple

from ..aio import AsyncClient, AsyncSandbox
from ..errors import NotFoundError

try:  # verl's own base class and response type when verl is installed
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
except ImportError:  # pragma: no cover - exercised where verl is absent
    OpenAIFunctionToolSchema = None  # type: ignore[assignment,misc]

    class BaseTool:  # type: ignore[no-redef]
        """Stands for verl.tools.base_tool.BaseTool where verl is not installed."""

        def __init__(self, config: dict, tool_schema: Any) -> None:
            self.config = config
            self.tool_schema = tool_schema or self.get_openai_tool_schema()
            self.name = self.tool_schema["function"]["name"]

        def get_openai_tool_schema(self) -> Any:
            return self.tool_schema

    class ToolResponse:  # type: ignore[no-redef]
        """Stands for verl.tools.schemas.ToolResponse (text, image, video)."""

        def __init__(self, text: Optional[str] = None, image: Optional[list] = None,
                     video: Optional[list] = None) -> None:
            self.text, self.image, self.video = text, image, video

        def is_empty(self) -> bool:
            return not self.text and not self.image and not self.video


# The schema the tool offers the model when the config gives none.
DEFAULT_SCHEMA: Dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "sandbox",
        "description": "Run a shell command, or a Python program, in this conversation's own Linux sandbox. "
                       "Files and installed packages persist between calls.",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "a shell command (bash)"},
                "code": {"type": "string", "description": "a Python program, run with python3"},
                "timeout": {"type": "number", "description": "seconds (default 30)"},
            },
            "required": [],
        },
    },
}


class DsecSandboxTool(BaseTool):
    """verl tool: each instance (trajectory) has a dsec sandbox.

    ``config`` keys: ``image``, ``backend`` (container), ``memory``, ``cpu``,
    ``ttl`` (3600 s), ``network``, ``workdir`` (/tmp), ``default_timeout`` (30 s),
    ``max_output`` (bytes kept of each stream), ``reward_command``,
    ``per_trajectory`` and ``idle_timeout`` (see the module's doc),
    ``dsec_addr`` and ``dsec_token`` (default $DSEC_ADDR, $DSEC_TOKEN).
    """

    def __init__(self, config: dict, tool_schema: Any = None) -> None:
        if tool_schema is None:
            tool_schema = (OpenAIFunctionToolSchema.model_validate(DEFAULT_SCHEMA)
                           if OpenAIFunctionToolSchema is not None else DEFAULT_SCHEMA)
        super().__init__(config, tool_schema)
        self.default_timeout = float(config.get("default_timeout", 30))
        self.workdir = config.get("workdir", "/tmp")
        self.client = AsyncClient(config.get("dsec_addr"), config.get("dsec_token"))
        self.per_trajectory = bool(config.get("per_trajectory", False))
        self._instances: Dict[str, Dict[str, Any]] = {}
        self._trajectories: Dict[str, AsyncSandbox] = {}  # request id -> its sandbox (per_trajectory)

    async def create(self, instance_id: Optional[str] = None, **kwargs: Any) -> Tuple[str, ToolResponse]:
        """Register an instance; its sandbox is made at its first execute."""
        if instance_id is None:
            instance_id = str(uuid.uuid4())
        self._instances[instance_id] = {"sandbox": None, "reward": 0.0, "create_kwargs": kwargs}
        return instance_id, ToolResponse()

    async def _new_sandbox(self, label: str, idle_timeout: Optional[float] = None) -> AsyncSandbox:
        c = self.config
        return await self.client.create(
            backend=c.get("backend", "container"), image=c.get("image"), memory=c.get("memory"), cpu=c.get("cpu"),
            ttl=c.get("ttl", 3600), idle_timeout=idle_timeout, network=c.get("network"),
            labels={"harness": "verl", "instance": label[:63]})

    async def _sandbox(self, instance_id: str, agent_data: Any = None) -> AsyncSandbox:
        inst = self._instances[instance_id]
        if inst["sandbox"] is not None:
            return inst["sandbox"]
        rid = getattr(agent_data, "request_id", None) if self.per_trajectory else None
        if rid is not None:  # the trajectory's sandbox, shared by its instances, kept by release
            rid = str(rid)
            if rid not in self._trajectories:
                self._trajectories[rid] = await self._new_sandbox(rid, self.config.get("idle_timeout", 600))
            inst["trajectory"] = rid
            return self._trajectories[rid]
        inst["sandbox"] = await self._new_sandbox(instance_id)
        return inst["sandbox"]

    async def execute(self, instance_id: str, parameters: Dict[str, Any],
                      **kwargs: Any) -> Tuple[ToolResponse, float, dict]:
        """Run the call's command or code; see the module's doc for the answer."""
        timeout = float(parameters.get("timeout") or self.default_timeout)
        if parameters.get("command"):
            cmd: Any = ["bash", "-c", str(parameters["command"])]
            stdin = None
        elif parameters.get("code"):
            cmd, stdin = ["python3", "-"], str(parameters["code"])
        else:
            return ToolResponse(text="Give either command or code."), 0.0, {"error": "no command"}
        sb = await self._sandbox(instance_id, kwargs.get("agent_data"))
        try:
            r = await sb.exec(cmd, timeout=timeout, cwd=self.workdir, stdin=stdin,
                              max_output=self.config.get("max_output"))
        except NotFoundError:  # a trajectory's sandbox deleted when idle is not reused
            self._trajectories.pop(self._instances[instance_id].get("trajectory", ""), None)
            raise
        text = r.stdout + r.stderr
        metrics = {"exit_code": r.exit_code, "timed_out": r.timed_out, "duration": r.duration}
        if r.timed_out:
            text += f"\n[timed out after {timeout:g} s]"
        elif r.oom_killed:
            text += "\n[killed: out of memory]"
            metrics["oom_killed"] = True
        elif r.exit_code != 0:
            text += f"\n[exit code {r.exit_code}]"
        return ToolResponse(text=text), 0.0, metrics

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """``reward_command``'s verdict in the instance's sandbox (0.0 without one)."""
        cmd = self.config.get("reward_command")
        inst = self._instances[instance_id]
        if cmd:
            sb = await self._sandbox(instance_id, kwargs.get("agent_data"))
            r = await sb.exec(["bash", "-c", cmd], timeout=self.default_timeout, cwd=self.workdir)
            inst["reward"] = 1.0 if r.ok else 0.0
        return inst["reward"]

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Delete the instance's sandbox (one already gone is released)."""
        inst = self._instances.pop(instance_id, None)
        if inst and inst["sandbox"] is not None:
            try:
                await inst["sandbox"].delete()
            except NotFoundError:
                pass

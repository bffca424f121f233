"""A mini-swe-agent environment backed by a dsec sandbox.

One line in a mini-swe-agent config (``environment:`` section)::

    environment:
      environment_class: dsec.harness.minisweagent.DsecEnvironment
      image: debian          # any of the node's images, or a registry reference
      timeout: 60

mini-swe-agent loads the class by its path (``get_environment``) and builds it
from the section's keys (:class:`DsecEnvironmentConfig`). It follows the
interface of mini-swe-agent 2.x's environments (``minisweagent.Environment``):
``execute(action, cwd="", *, timeout=None)`` returns ``output`` (stdout and
stderr together), ``returncode`` and ``exception_info``; a first output line
``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` with exit status 0 raises
``Submitted``; ``get_template_vars``, ``serialize`` and ``cleanup`` as there.

Outcomes, the way mini-swe-agent's own environments report them: a non-zero exit
is the command's (``returncode``); a timeout is an observation with
``returncode`` -1, the partial output and ``exception_info`` (``extra.exception_type``
``TimeoutExpired``), so the agent sees it and goes on; a dsec failure (the server
unreachable, the sandbox gone) raises :class:`dsec.DsecError`, which ends the run
with that exception's name as its exit status instead of being shown to the model.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
from typing import Any, Dict, List, Optional

from ..client import Client, Sandbox

try:  # the harness's own exception when it is installed
    from minisweagent.exceptions import Submitted
except ImportError:  # pragma: no cover - exercised where mini-swe-agent is absent

    class Submitted(Exception):  # type: ignore[no-redef]
        """Stands for minisweagent.exceptions.Submitted (an InterruptAgentFlow
        carrying the exit message) where mini-swe-agent is not installed."""

        def __init__(self, *messages: dict) -> None:
            self.messages = messages
            super().__init__()


SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


@dataclasses.dataclass
class DsecEnvironmentConfig:
    """The environment's settings (the keys of mini-swe-agent's ``environment:``)."""

    image: Optional[str] = None
    """The sandbox's image (None: the node's default)."""
    backend: str = "container"
    cwd: str = "/"
    """Working directory of every command unless ``execute`` is given one."""
    env: Dict[str, str] = dataclasses.field(default_factory=dict)
    forward_env: List[str] = dataclasses.field(default_factory=list)
    """Host variables passed to every command when set (``env`` wins)."""
    timeout: int = 30
    """A command's time limit in seconds unless ``execute`` is given one."""
    interpreter: List[str] = dataclasses.field(default_factory=lambda: ["bash", "-lc"])
    """The command runs as ``[*interpreter, command]``."""
    memory: Optional[str] = None
    cpu: Optional[float] = None
    ttl: Optional[int] = 7200
    """The sandbox is deleted after this many seconds whatever happens."""
    network: Optional[Dict[str, Any]] = None
    """dsec's network policy (None: the server's default)."""
    dsec_addr: Optional[str] = None
    """The dsec server ($DSEC_ADDR by default)."""
    dsec_token: Optional[str] = None

    def model_dump(self, mode: str = "python") -> Dict[str, Any]:
        """The settings as a dict (named as pydantic's, which mini-swe-agent's
        configs are), without the token."""
        d = dataclasses.asdict(self)
        d.pop("dsec_token", None)
        return d


def _merge(*dicts: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """Later keys win; nested dicts merge."""
    out: Dict[str, Any] = {}
    for d in dicts:
        for k, v in (d or {}).items():
            if isinstance(v, dict) and isinstance(out.get(k), dict):
                out[k] = _merge(out[k], v)
            else:
                out[k] = v
    return out


class DsecEnvironment:
    """Runs mini-swe-agent's actions in one dsec sandbox, created with the
    environment and deleted by :meth:`cleanup`."""

    def __init__(self, *, config_class: type = DsecEnvironmentConfig, logger: Optional[logging.Logger] = None,
                 **kwargs: Any) -> None:
        self.logger = logger or logging.getLogger("minisweagent.environment")
        self.config = config_class(**kwargs)
        self.sandbox: Optional[Sandbox] = None
        self.client = Client(self.config.dsec_addr, self.config.dsec_token)
        self.sandbox = self.client.create(backend=self.config.backend, image=self.config.image,
                                          memory=self.config.memory, cpu=self.config.cpu, ttl=self.config.ttl,
                                          network=self.config.network, labels={"harness": "mini-swe-agent"})
        self.logger.info("started dsec sandbox %s", self.sandbox.id)

    def execute(self, action: dict, cwd: str = "", *, timeout: Optional[int] = None) -> Dict[str, Any]:
        """Run ``action["command"]``; see the module's doc for what comes back."""
        command = action.get("command", "")
        assert self.sandbox is not None, "sandbox not started"
        env = {k: v for k in self.config.forward_env if (v := os.environ.get(k)) is not None}
        env.update(self.config.env)
        limit = timeout or self.config.timeout
        # stdout and stderr in one stream, in the order written (as mini-swe-agent's
        # environments capture them).
        argv = ["/bin/sh", "-c", 'exec "$@" 2>&1', "sh", *self.config.interpreter, command]
        r = self.sandbox.exec(argv, timeout=limit, env=env or None, cwd=cwd or self.config.cwd)
        if r.timed_out:
            msg = f"Command '{command}' timed out after {limit} seconds"
            output: Dict[str, Any] = {
                "output": r.stdout, "returncode": -1,
                "exception_info": f"An error occurred while executing the command: {msg}",
                "extra": {"exception_type": "TimeoutExpired", "exception": msg},
            }
        else:
            output = {"output": r.stdout, "returncode": r.exit_code, "exception_info": r.error or ""}
        self._check_finished(output)
        return output

    def _check_finished(self, output: Dict[str, Any]) -> None:
        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_MARKER and output["returncode"] == 0:
            submission = "".join(lines[1:])
            raise Submitted({"role": "exit", "content": submission,
                             "extra": {"exit_status": "Submitted", "submission": submission}})

    def get_template_vars(self, **kwargs: Any) -> Dict[str, Any]:
        """The config, the host's uname fields and kwargs, for the prompt templates."""
        return _merge(self.config.model_dump(), platform.uname()._asdict(), kwargs)

    def serialize(self) -> Dict[str, Any]:
        return {"info": {"config": {
            "environment": self.config.model_dump(mode="json"),
            "environment_type": f"{self.__class__.__module__}.{self.__class__.__name__}",
        }}}

    def cleanup(self) -> None:
        """Delete the sandbox (once)."""
        sb, self.sandbox = getattr(self, "sandbox", None), None
        if sb is not None:
            try:
                sb.delete()
            except Exception as e:  # noqa: BLE001 - the ttl deletes it anyway
                self.logger.warning("deleting dsec sandbox %s: %s", sb.id, e)

    def __del__(self) -> None:
        self.cleanup()

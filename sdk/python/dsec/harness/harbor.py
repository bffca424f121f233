"""A Harbor environment backed by a dsec sandbox.

One option of ``harbor run`` (terminal-bench 2 and every other Harbor dataset)::

    harbor run -d terminal-bench@2.0 -a oracle \\
        --environment-import-path dsec.harness.harbor:DsecEnvironment

Harbor imports the class by that path and builds one per trial with its
``BaseEnvironment`` arguments (``environment_dir``, ``environment_name``,
``session_id``, ``trial_paths``, ``task_env_config``, ``logger`` and the
environment kwargs, e.g. ``--ek dsec_addr=http://...``). It follows
``harbor.environments.base.BaseEnvironment``'s published methods, all
coroutines as there: ``start(force_build)``, ``stop(delete)``,
``exec(command, cwd, env, timeout_sec, user)`` returning ``ExecResult``
(``stdout``, ``stderr``, ``return_code``), ``upload_file``, ``upload_dir``,
``download_file``, ``download_dir``, ``is_dir``, ``is_file``,
``apply_network_policy``, ``run_healthcheck``; the properties ``is_mounted``
(False: Harbor downloads the logs), ``supports_gpus`` (False),
``can_disable_internet`` and ``supports_dynamic_network_policy`` (True).
Harbor itself is not imported: where it is installed its ``ExecResult`` is
returned, else a class with the same fields.

The sandbox's image: the ``image`` kwarg, else the task's ``docker_image``,
else the task's ``environment/Dockerfile`` built on the dsec server
(``POST /v1/images:build``, cached by step, so each task builds once) into
the environment ``harbor-<environment name>``. Its size: the task's ``cpus``,
``memory_mb``, ``storage_mb``. Its network, the task's mode: public (internet:
public addresses), ``no-network`` (``allow_internet = false`` in older tasks:
loopback only) or ``allowlist`` (``allowed_hosts``: host names as dsec's
domain rules, addresses and CIDRs as destinations); ``apply_network_policy``
changes it on the running sandbox.

Outcomes, Harbor's way: a command's non-zero exit is its ``return_code`` (the
task's failure, as in every Harbor environment); a command past
``timeout_sec`` raises :class:`CommandTimeoutError`, a ``RuntimeError`` with
the message Harbor's Docker environment raises ("Command timed out after N
seconds"); a dsec failure (the server unreachable, the sandbox gone) raises
:class:`dsec.DsecError`, which Harbor records as the trial's exception, not a
verifier result.
"""

from __future__ import annotations

import asyncio
import enum
import io
import logging
import os
import re
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from .._core import Req
from ..aio import AsyncClient, AsyncSandbox
from ..errors import NotFoundError

try:  # the harness's own result type when it is installed
    from harbor.environments.base import ExecResult  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - exercised where Harbor is absent

    class ExecResult:  # type: ignore[no-redef]
        """Stands for harbor.environments.base.ExecResult (a pydantic model)."""

        def __init__(self, *, stdout: Optional[str] = None, stderr: Optional[str] = None, return_code: int) -> None:
            self.stdout, self.stderr, self.return_code = stdout, stderr, return_code

        def __repr__(self) -> str:
            return f"ExecResult(return_code={self.return_code!r}, stdout={self.stdout!r}, stderr={self.stderr!r})"


class DsecEnvironmentType(str, enum.Enum):
    """What :meth:`DsecEnvironment.type` answers (Harbor reads its ``value``)."""

    DSEC = "dsec"


class CommandTimeoutError(RuntimeError):
    """A command ran past its ``timeout_sec`` (Harbor's environments raise a
    RuntimeError for it)."""


# Where Harbor's agents and verifiers write inside the environment
# (harbor.models.trial.paths.EnvironmentPaths); start creates them, as Harbor's
# environments that do not mount them do.
LOG_DIRS = ("/logs/agent", "/logs/verifier", "/logs/artifacts")

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _resolve_env(env: Dict[str, str]) -> Dict[str, str]:
    """A task's ``env`` with ``${VAR}`` and ``${VAR:-default}`` taken from the
    host, as Harbor resolves it; an unset variable without a default is an error."""
    out = {}
    for k, v in env.items():
        def sub(m: "re.Match[str]") -> str:
            val = os.environ.get(m.group(1))
            if val is None:
                if m.group(2) is None:
                    raise ValueError(f"environment variable {m.group(1)} (needed by {k}) is not set")
                return m.group(2)
            return val
        out[k] = _ENV_REF.sub(sub, str(v))
    return out


def _mode(v: Any) -> str:
    return str(getattr(v, "value", v) or "")


def network_body(mode: str, allowed_hosts: Optional[List[str]] = None) -> Optional[Dict[str, Any]]:
    """dsec's network policy for a Harbor network mode (None: loopback only)."""
    if mode == "public":
        return {"allow": ["0.0.0.0/0"]}
    if mode == "no-network":
        return None
    if mode == "allowlist":
        allow: List[str] = []
        domains: List[str] = []
        for h in allowed_hosts or []:
            (allow if re.fullmatch(r"[0-9.]+(/\d+)?", h) else domains).append(h)
        body: Dict[str, Any] = {"allow": allow}
        if domains:
            body["allow_domains"] = domains
        return body
    raise ValueError(f"network mode {mode!r} is not one of public, no-network, allowlist")


class DsecEnvironment:
    """One Harbor trial's environment: one dsec sandbox, created by
    :meth:`start` and deleted by :meth:`stop`."""

    def __init__(
        self,
        environment_dir: Union[Path, str],
        environment_name: str,
        session_id: str,
        trial_paths: Any,
        task_env_config: Any,
        logger: Optional[logging.Logger] = None,
        override_cpus: Optional[int] = None,
        override_memory_mb: Optional[int] = None,
        override_storage_mb: Optional[int] = None,
        override_gpus: Optional[int] = None,
        suppress_override_warnings: bool = False,
        persistent_env: Optional[Dict[str, str]] = None,
        *args: Any,
        dsec_addr: Optional[str] = None,
        dsec_token: Optional[str] = None,
        image: Optional[str] = None,
        backend: str = "container",
        ttl: Union[int, str] = 14400,
        max_output: Union[int, str, None] = "16m",
        **kwargs: Any,
    ) -> None:
        self.environment_dir = Path(environment_dir)
        self.environment_name = environment_name
        self.session_id = session_id
        self.trial_paths = trial_paths
        self.task_env_config = task_env_config
        self.logger = (logger or logging.getLogger("harbor")).getChild(__name__)
        self.default_user: Union[str, int, None] = None
        self._cpus = override_cpus if override_cpus is not None else getattr(task_env_config, "cpus", None)
        self._memory_mb = override_memory_mb if override_memory_mb is not None else getattr(task_env_config, "memory_mb", None)
        self._storage_mb = (override_storage_mb if override_storage_mb is not None
                            else getattr(task_env_config, "storage_mb", None))
        gpus = override_gpus if override_gpus is not None else getattr(task_env_config, "gpus", None)
        if gpus:
            raise RuntimeError(f"Task requires {gpus} GPU(s) but the dsec environment does not allocate GPUs.")
        self._persistent_env = {**_resolve_env(dict(getattr(task_env_config, "env", None) or {})),
                                **(persistent_env or {})}
        self._image = image
        self._backend = backend
        self._ttl = int(ttl)
        self._max_output = max_output
        self.client = AsyncClient(dsec_addr, dsec_token)
        self.sandbox: Optional[AsyncSandbox] = None
        self._validate_definition()

    # ---- what the environment is --------------------------------------------------

    @staticmethod
    def type() -> DsecEnvironmentType:
        return DsecEnvironmentType.DSEC

    @property
    def is_mounted(self) -> bool:
        return False

    @property
    def supports_gpus(self) -> bool:
        return False

    @property
    def can_disable_internet(self) -> bool:
        return True

    @property
    def supports_dynamic_network_policy(self) -> bool:
        return True

    @classmethod
    def preflight(cls) -> None:
        """Harbor calls this once before queueing trials: the server must be named."""
        if not os.environ.get("DSEC_ADDR"):
            raise SystemExit("DSEC_ADDR is not set (or give --ek dsec_addr=URL --ek dsec_token=TOKEN)")

    def _validate_definition(self) -> None:
        if self._image or getattr(self.task_env_config, "docker_image", None):
            return
        if not (self.environment_dir / "Dockerfile").exists():
            raise FileNotFoundError(f"{self.environment_dir / 'Dockerfile'} not found and the task names no docker_image")

    def _baseline(self) -> Dict[str, Any]:
        """The task's network mode and allowed hosts (older Harbor: allow_internet)."""
        cfg = self.task_env_config
        mode = _mode(getattr(cfg, "network_mode", None))
        if not mode:
            mode = "public" if getattr(cfg, "allow_internet", True) else "no-network"
        return {"mode": mode, "hosts": list(getattr(cfg, "allowed_hosts", None) or [])}

    # ---- life cycle ------------------------------------------------------------------

    async def start(self, force_build: bool) -> None:
        """Build or name the image, create the sandbox, make Harbor's log directories."""
        image = self._image or getattr(self.task_env_config, "docker_image", None)
        if not image:
            image = await self._build(force_build)
        net = self._baseline()
        self.sandbox = await self.client.create(
            backend=self._backend, image=image, cpu=self._cpus,
            memory=f"{self._memory_mb}m" if self._memory_mb else None,
            disk=f"{self._storage_mb}m" if self._storage_mb else None, ttl=self._ttl,
            network=network_body(net["mode"], net["hosts"]),
            labels={"harness": "harbor", "harbor.session": self.session_id[:63]})
        self.logger.info("started dsec sandbox %s (image %s)", self.sandbox.id, image)
        for d in LOG_DIRS:
            await self.sandbox.files.mkdir(d)

    async def _build(self, force_build: bool) -> str:
        """Build environment/Dockerfile on the server (its build cache makes an
        unchanged task's rebuild a lookup; force_build changes nothing there)."""
        name = "harbor-" + re.sub(r"[^a-z0-9._-]", "-", self.environment_name.lower())[:100]
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            for entry in sorted(os.listdir(self.environment_dir)):
                tf.add(str(self.environment_dir / entry), arcname=entry)
        timeout = float(getattr(self.task_env_config, "build_timeout_sec", 600.0) or 600.0)
        await self.client._send(Req("POST", "/v1/images:build", query={"name": name}, body=buf.getvalue(),
                                    ctype="application/x-tar", timeout=timeout + 60))
        self.logger.info("built %s from %s", name, self.environment_dir / "Dockerfile")
        return name

    async def stop(self, delete: bool) -> None:
        """Delete the sandbox when ``delete``; else leave it to its ttl (for a
        look inside: ``dsec exec ID ...``)."""
        sb, self.sandbox = self.sandbox, None
        try:
            if sb is not None and delete:
                try:
                    await sb.delete()
                except NotFoundError:
                    pass
            elif sb is not None:
                self.logger.info("kept dsec sandbox %s (deleted after its ttl)", sb.id)
        finally:
            await self.client.aclose()

    async def prepare_logs_for_host(self) -> None:
        """Nothing to do: downloaded files belong to the caller."""

    async def attach(self) -> None:
        raise NotImplementedError("dsec sandboxes are attached with `dsec exec -it ID bash`")

    # ---- commands ----------------------------------------------------------------------

    def _sb(self) -> AsyncSandbox:
        if self.sandbox is None:
            raise RuntimeError("the environment is not started")
        return self.sandbox

    async def exec(
        self,
        command: str,
        cwd: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        timeout_sec: Optional[int] = None,
        user: Union[str, int, None] = None,
    ) -> ExecResult:
        """Run ``bash -c command`` (as Harbor's environments do) as ``user`` (else
        ``default_user``, else the image's), in ``cwd`` (else the image's
        WORKDIR), with the task's env and ``env``; see the module's doc for
        what a timeout and a failure do."""
        user = user if user is not None else self.default_user
        merged = {**self._persistent_env, **(env or {})}
        # No timeout_sec means no limit in Harbor: the sandbox's ttl bounds it here.
        limit = timeout_sec if timeout_sec else self._ttl
        r = await self._sb().exec(["bash", "-c", command], timeout=limit, env=merged or None, cwd=cwd,
                                  user=None if user is None else str(user), max_output=self._max_output)
        if r.timed_out:
            raise CommandTimeoutError(f"Command timed out after {timeout_sec} seconds")
        return ExecResult(stdout=r.stdout or None, stderr=r.stderr or None, return_code=r.exit_code)

    async def is_dir(self, path: str, user: Union[str, int, None] = None) -> bool:
        try:
            return (await self._sb().files.stat(path)).type == "dir"
        except NotFoundError:
            return False

    async def is_file(self, path: str, user: Union[str, int, None] = None) -> bool:
        try:
            return (await self._sb().files.stat(path)).type == "file"
        except NotFoundError:
            return False

    async def apply_network_policy(self, policy: Any) -> None:
        """Replace the sandbox's network with Harbor's policy (``network_mode``,
        ``allowed_hosts``) for the next phase; connections already open go on."""
        body = network_body(_mode(policy.network_mode), list(getattr(policy, "allowed_hosts", None) or []))
        sb = self._sb()
        await sb._json(Req("PUT", f"/v1/sandboxes/{sb.id}/network", json_body=body or {}, retry=True))

    async def run_healthcheck(self) -> None:
        """The task's healthcheck (Docker HEALTHCHECK semantics, as Harbor's base
        environment runs it): failures in the start period do not count; then
        ``retries`` failures in a row raise RuntimeError."""
        hc = getattr(self.task_env_config, "healthcheck", None)
        if hc is None:
            return
        start_end = time.monotonic() + float(hc.start_period_sec)
        failures = 0
        while True:
            try:
                ok = (await self.exec(hc.command, timeout_sec=int(hc.timeout_sec))).return_code == 0
            except CommandTimeoutError:
                ok = False
            if ok:
                return
            if time.monotonic() < start_end:
                await asyncio.sleep(float(hc.start_interval_sec))
                continue
            failures += 1
            if failures >= int(hc.retries):
                raise RuntimeError(f"Healthcheck failed after {hc.retries} consecutive retries: {hc.command}")
            await asyncio.sleep(float(hc.interval_sec))

    # ---- files -------------------------------------------------------------------------

    async def upload_file(self, source_path: Union[Path, str], target_path: str) -> None:
        """Copy a local file to ``target_path`` (its directory is created)."""
        sb = self._sb()
        parent = os.path.dirname(target_path.rstrip("/")) or "/"
        await sb.files.mkdir(parent)
        await sb.files.write(target_path, Path(source_path).read_bytes(), mode=os.stat(source_path).st_mode & 0o7777)

    async def upload_dir(self, source_dir: Union[Path, str], target_dir: str) -> None:
        """Copy a local directory's contents into ``target_dir`` (created)."""
        if not os.path.isdir(source_dir):
            raise FileNotFoundError(str(source_dir))
        await self._sb().files.upload(source_dir, target_dir)

    async def download_file(self, source_path: str, target_path: Union[Path, str]) -> None:
        """Copy ``source_path`` to the local ``target_path`` (its directory is created)."""
        data = await self._sb().files.read(source_path)
        target = Path(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    async def download_dir(self, source_dir: str, target_dir: Union[Path, str]) -> None:
        """Copy ``source_dir``'s contents into the local ``target_dir``, over
        the files there."""
        sb = self._sb()
        with tempfile.TemporaryDirectory(prefix="dsec-harbor-") as tmp:
            await sb.files.download(source_dir, tmp)
            base = os.path.join(tmp, os.path.basename(source_dir.rstrip("/")) or ".")
            shutil.copytree(base, target_dir, symlinks=True, dirs_exist_ok=True)

    def __repr__(self) -> str:
        sid = self.sandbox.id if self.sandbox else None
        return f"DsecEnvironment({self.environment_name!r}, session={self.session_id!r}, sandbox={sid!r})"

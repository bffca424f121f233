"""Exceptions raised by the dsec SDK.

Every error the API returns becomes a :class:`DsecError` subclass chosen by its stable
``code``. Two flags tell the caller what to do:

* ``infrastructure`` -- dsec itself failed (node, runtime, network); the request was
  fine and may succeed elsewhere or later.
* ``retryable`` -- repeating the same request may succeed.

A command's own failure (non-zero exit, timeout, OOM) is *not* an exception: it is in
:class:`dsec.ExecResult`; call :meth:`dsec.ExecResult.check` to turn it into a
:class:`CommandError`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple, Type

if TYPE_CHECKING:  # pragma: no cover
    from .types import ExecResult

__all__ = [
    "DsecError",
    "InfrastructureError",
    "SandboxGoneError",
    "NotFoundError",
    "AuthError",
    "InvalidArgumentError",
    "ConflictError",
    "PayloadTooLargeError",
    "BadGatewayError",
    "NotImplementedByBackendError",
    "TrajectoryDivergedError",
    "OutcomeUnknownError",
    "TrajectorySandboxLostError",
    "QuotaExceededError",
    "PermissionDeniedError",
    "CommandError",
    "CreateManyError",
    "error_from_response",
    "network_error",
]


class DsecError(Exception):
    """An error of the dsec API (or of reaching it).

    Attributes: ``code`` (stable machine-readable code, e.g. ``"not_found"``),
    ``status`` (HTTP status; 0 when no response arrived), ``message``, ``retryable``
    and ``infrastructure``.
    """

    default_code = "internal"
    default_infrastructure = False
    default_retryable = False

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        status: int = 0,
        retryable: Optional[bool] = None,
        infrastructure: Optional[bool] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code: str = code or self.default_code
        self.status = status
        self.retryable: bool = self.default_retryable if retryable is None else retryable
        self.infrastructure: bool = (
            self.default_infrastructure if infrastructure is None else infrastructure
        )

    def __str__(self) -> str:
        s = f"{self.code}: {self.message}"
        if self.status:
            s += f" (HTTP {self.status})"
        return s

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, status={self.status}, "
            f"message={self.message!r}, retryable={self.retryable}, "
            f"infrastructure={self.infrastructure})"
        )


class InfrastructureError(DsecError):
    """dsec failed (internal, unavailable, resource_exhausted, deadline_exceeded or a
    network error): the request may succeed later or on another node."""

    default_code = "unavailable"
    default_infrastructure = True
    default_retryable = True


class SandboxGoneError(DsecError):
    """The sandbox's processes died (code ``sandbox_gone``): an infrastructure failure
    that repeating the request on the same sandbox will not fix; create a new one."""

    default_code = "sandbox_gone"
    default_infrastructure = True
    default_retryable = False


class NotFoundError(DsecError):
    """No such sandbox, process or file (404)."""

    default_code = "not_found"


class AuthError(DsecError):
    """Missing or wrong bearer token (401)."""

    default_code = "unauthorized"


class InvalidArgumentError(DsecError):
    """Malformed or out-of-range input (400)."""

    default_code = "invalid_argument"


class ConflictError(DsecError):
    """Wrong state (e.g. the sandbox is paused) or the object already exists (409)."""

    default_code = "conflict"


class PayloadTooLargeError(DsecError):
    """A request body over the server's limit (413)."""

    default_code = "payload_too_large"


class BadGatewayError(DsecError):
    """The HTTP proxy could not reach the port inside the sandbox (nothing listening):
    the task's problem, not dsec's (502)."""

    default_code = "bad_gateway"


class StartFailedError(DsecError):
    """A create's start command exited before it was ready, or was not ready in
    time (422): the task's failure, not dsec's. The message names the sandbox,
    kept for inspection (delete it when done), and ends with the command's
    output."""

    default_code = "start_failed"


class NotImplementedByBackendError(DsecError):
    """The sandbox's backend lacks the capability (501)."""

    default_code = "not_implemented"


class TrajectoryDivergedError(DsecError):
    """A replayed trajectory step differs from the recorded one (code
    ``trajectory_diverged``)."""

    default_code = "trajectory_diverged"


class OutcomeUnknownError(DsecError):
    """dsec cannot tell whether the operation took effect (code ``outcome_unknown``):
    do not blindly repeat a non-idempotent operation."""

    default_code = "outcome_unknown"
    default_infrastructure = True
    default_retryable = False


class TrajectorySandboxLostError(InfrastructureError):
    """The trajectory's sandbox is gone (code ``trajectory_sandbox_lost``, 410): live
    steps cannot run (replays still answer). Not retryable: ``traj.rebuild()``
    re-creates the sandbox from the log."""

    default_code = "trajectory_sandbox_lost"
    default_infrastructure = True
    default_retryable = False


class QuotaExceededError(DsecError):
    """The caller's project is at one of its quotas (code ``quota_exceeded``, 429):
    ``max_sandboxes``, ``cpu`` or ``memory_bytes``, named in the message. Nothing was
    created. Not infrastructure and not retryable as is: delete sandboxes first, or
    ask an operator for a larger quota (``dsec project set-quota``)."""

    default_code = "quota_exceeded"


class PermissionDeniedError(AuthError):
    """The token is valid but its project may not do this (code
    ``permission_denied``, 403), e.g. project administration with a token of a
    project other than ``default``."""

    default_code = "permission_denied"


class CommandError(Exception):
    """Raised by :meth:`dsec.ExecResult.check` when a command did not exit 0.

    Not a :class:`DsecError`: dsec worked, the command failed.
    """

    def __init__(self, result: "ExecResult", cmd: Any = None) -> None:
        self.result = result
        self.cmd = cmd
        why = f"exit code {result.exit_code}"
        if result.signal:
            why = f"killed by {result.signal}"
        if result.timed_out:
            why = "timed out"
        if result.oom_killed:
            why = "killed by the OOM killer"
        tail = (result.stderr or "")[-500:].strip()
        msg = f"command {cmd!r} failed: {why}" if cmd is not None else f"command failed: {why}"
        if tail:
            msg += f"; stderr: {tail}"
        super().__init__(msg)

    @property
    def exit_code(self) -> int:
        return self.result.exit_code


class CreateManyError(DsecError):
    """``create_many`` could not create every sandbox.

    ``failures`` lists ``(index, exception)`` for each sandbox that failed. The
    sandboxes that were created have already been deleted (all-or-nothing), so the
    caller owns nothing; ``deleted`` counts them and ``cleanup_failures`` lists the
    ids that could not be deleted (they expire with their TTL, if any).
    """

    default_code = "create_many_failed"

    def __init__(
        self,
        failures: List[Tuple[int, BaseException]],
        n: int,
        deleted: int = 0,
        cleanup_failures: Optional[List[str]] = None,
    ) -> None:
        self.failures = failures
        self.n = n
        self.deleted = deleted
        self.cleanup_failures = cleanup_failures or []
        first = failures[0][1] if failures else None
        infra = all(getattr(e, "infrastructure", False) for _, e in failures)
        retry = all(getattr(e, "retryable", False) for _, e in failures)
        msg = f"{len(failures)} of {n} sandboxes failed to create (first: {first!r}); deleted the {deleted} created"
        super().__init__(msg, retryable=retry, infrastructure=infra)


_BY_CODE: Dict[str, Type[DsecError]] = {
    "unauthorized": AuthError,
    "invalid_argument": InvalidArgumentError,
    "not_found": NotFoundError,
    "already_exists": ConflictError,
    "conflict": ConflictError,
    "payload_too_large": PayloadTooLargeError,
    "resource_exhausted": InfrastructureError,
    "deadline_exceeded": InfrastructureError,
    "unavailable": InfrastructureError,
    "internal": InfrastructureError,
    "sandbox_gone": SandboxGoneError,
    "bad_gateway": BadGatewayError,
    "not_implemented": NotImplementedByBackendError,
    "trajectory_diverged": TrajectoryDivergedError,
    "outcome_unknown": OutcomeUnknownError,
    "trajectory_sandbox_lost": TrajectorySandboxLostError,
    "quota_exceeded": QuotaExceededError,
    "permission_denied": PermissionDeniedError,
    "start_failed": StartFailedError,
}

_CODE_FOR_STATUS = {
    401: "unauthorized",
    403: "permission_denied",
    404: "not_found",
    409: "conflict",
    410: "trajectory_sandbox_lost",
    413: "payload_too_large",
    422: "start_failed",
    429: "resource_exhausted",
    501: "not_implemented",
    502: "unavailable",
    503: "unavailable",
    504: "deadline_exceeded",
}

# Flags implied by a code when the body does not carry them (mirrors api.NewError).
_INFRA_RETRY = {
    "internal": (True, True),
    "unavailable": (True, True),
    "resource_exhausted": (True, True),
    "deadline_exceeded": (True, True),
    "sandbox_gone": (True, False),
    "trajectory_sandbox_lost": (True, False),
}


KEEPALIVE_HEADER = "x-dsec-keepalive"
"""Set on a 200 answer to a blocking call (exec, process wait) that the server
started before the call ended, keeping the connection busy with whitespace."""


def late_error(body: bytes) -> Optional[DsecError]:
    """The error of a call whose answer had started (KEEPALIVE_HEADER): the body
    is {"error": {...}, "status": N} instead of the result; None for a result."""
    try:
        doc: Any = json.loads(body) if body else None
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("error"), Mapping) or not isinstance(doc.get("status"), int):
        return None
    if not doc["error"].get("code"):
        return None
    return error_from_response(doc["status"], body)


def error_from_response(status: int, body: bytes) -> DsecError:
    """Build the exception for a non-2xx response (status and raw body)."""
    code: Optional[str] = None
    message = ""
    infra: Optional[bool] = None
    retry: Optional[bool] = None
    try:
        doc: Any = json.loads(body) if body else None
    except ValueError:
        doc = None
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, Mapping) and err.get("code"):
        code = str(err["code"])
        message = str(err.get("message", ""))
        if "infrastructure" in err:
            infra = bool(err["infrastructure"])
        if "retryable" in err:
            retry = bool(err["retryable"])
    else:
        code = _CODE_FOR_STATUS.get(status)
        if code is None:
            code = "internal" if status >= 500 else "invalid_argument"
        text = body[:2000].decode("utf-8", "replace").strip()
        message = f"HTTP {status}: {text}" if text else f"HTTP {status}"
        infra, retry = _INFRA_RETRY.get(code, (False, False))
    cls = _BY_CODE.get(code, DsecError)
    return cls(message, code=code, status=status, retryable=retry, infrastructure=infra)


def network_error(exc: BaseException, what: str = "request to the dsec server failed") -> InfrastructureError:
    """A request that got no (complete) response: infrastructure, retryable (but the
    SDK only repeats it when the operation is safe to repeat)."""
    e = InfrastructureError(f"{what}: {type(exc).__name__}: {exc}", code="unavailable", status=0)
    e.__cause__ = exc
    return e

"""dsec: Python SDK for dsec sandboxes (sync and asyncio clients).

    import dsec

    client = dsec.Client()                 # DSEC_ADDR / DSEC_TOKEN, or the defaults
    with client.create(memory="512m", ttl=3600) as sb:
        r = sb.exec("python3 -c 'print(6*7)'")
        print(r.exit_code, r.stdout)

    async with dsec.AsyncClient() as ac:
        sb = await ac.create()
        r = await sb.exec(["echo", "hi"])
        await sb.delete()
"""

from .aio import AsyncClient, AsyncExecStream, AsyncFiles, AsyncProcess, AsyncSandbox, AsyncTrajectory
from .client import Client, ExecStream, Files, Process, Sandbox, Trajectory
from .errors import (
    AuthError,
    BadGatewayError,
    CommandError,
    ConflictError,
    CreateManyError,
    DsecError,
    InfrastructureError,
    InvalidArgumentError,
    NotFoundError,
    NotImplementedByBackendError,
    OutcomeUnknownError,
    PayloadTooLargeError,
    PermissionDeniedError,
    QuotaExceededError,
    SandboxGoneError,
    StartFailedError,
    TrajectoryDivergedError,
    TrajectorySandboxLostError,
)
from .types import (
    CodeContext,
    CodeError,
    CodeResult,
    ExecResult,
    Execution,
    FileInfo,
    FnCallCompile,
    FnCallResult,
    FnCallTestResult,
    HTTPResponse,
    NetworkStatus,
    ProcessInfo,
    RebuildResult,
    ReclaimResult,
    RunResult,
    SandboxInfo,
    StartStatus,
    StreamChunk,
    TrajectoryInfo,
    TrajectoryStep,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AsyncExecStream",
    "AsyncFiles",
    "AsyncProcess",
    "AsyncSandbox",
    "AsyncTrajectory",
    "AuthError",
    "BadGatewayError",
    "Client",
    "CommandError",
    "ConflictError",
    "CreateManyError",
    "DsecError",
    "CodeContext",
    "CodeError",
    "CodeResult",
    "ExecResult",
    "Execution",
    "ExecStream",
    "FileInfo",
    "FnCallCompile",
    "FnCallResult",
    "FnCallTestResult",
    "Files",
    "HTTPResponse",
    "InfrastructureError",
    "InvalidArgumentError",
    "NotFoundError",
    "NotImplementedByBackendError",
    "OutcomeUnknownError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "QuotaExceededError",
    "NetworkStatus",
    "Process",
    "ProcessInfo",
    "RebuildResult",
    "ReclaimResult",
    "RunResult",
    "Sandbox",
    "SandboxGoneError",
    "SandboxInfo",
    "StartFailedError",
    "StartStatus",
    "StreamChunk",
    "Trajectory",
    "TrajectoryDivergedError",
    "TrajectoryInfo",
    "TrajectorySandboxLostError",
    "TrajectoryStep",
    "__version__",
]

"""Adapters that let agent harnesses drive dsec sandboxes.

* :mod:`dsec.harness.minisweagent` -- a mini-swe-agent environment
  (``environment_class: dsec.harness.minisweagent.DsecEnvironment``).
* :mod:`dsec.harness.verl` -- a verl stateful tool
  (``class_name: dsec.harness.verl.DsecSandboxTool``).
* :mod:`dsec.harness.harbor` -- a Harbor environment (terminal-bench 2)
  (``harbor run --environment-import-path dsec.harness.harbor:DsecEnvironment``).

Each maps dsec's outcomes the harness's way: a command's non-zero exit is the
task's own failure (in the result), a timeout is reported as the harness reports
its own timeouts, and a dsec failure (server unreachable, sandbox gone) raises
:class:`dsec.DsecError` so the harness does not score it as the agent's doing.
The harnesses are imported only when installed; the SDK stays standard library only.
"""

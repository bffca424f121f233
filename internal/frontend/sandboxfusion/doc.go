// Package sandboxfusion serves bytedance SandboxFusion's HTTP API on top of dsec's
// FnCall engine, so clients written for SandboxFusion (verl's sandbox_fusion reward
// utility, SandboxFusion's own SDK, LLM tool wrappers) work with only their sandbox
// URL changed.
//
// Served routes (shapes follow SandboxFusion's public API: sandbox/server/sandbox_api.py
// and sandbox/datasets/types.py in its repository):
//
//   - POST /run_code: one program, one stdin. Languages are the ones dsec's judge
//     image has: python, pytest, cpp, go, bash, nodejs, php, ruby, lua, perl,
//     rust, java, junit, typescript, kotlin_script, scala, R, csharp, racket,
//     D_ut, verilog, and the modes go_test (go test) and sql (an in-memory SQLite
//     database), which run as raw FnCall commands (the table and the
//     differences: docs/api-sandboxfusion.md).
//     cuda and python_gpu run only where a node advertises a GPU (gpu.go),
//     else answer a SandboxError naming the language. Any other SandboxFusion
//     language answers 400 with "unsupported language".
//     `files` (base64 by path) are placed in the work directory; `fetch_files`
//     is not supported (400 when non-empty), because a FnCall run's work
//     directory dies with its sandbox.
//   - POST /submit: judge a completion against stdio test cases given inline in
//     `config.provided_data` (SandboxFusion's CommonOJDataset shape); the code is
//     extracted from the completion's fenced blocks and every case's stdout is
//     compared as SandboxFusion does (per line, trimmed, case-insensitive, numbers
//     within a relative 1e-5). Registered datasets need SandboxFusion's database
//     and answer 400 "no eval class found".
//   - POST /run_jupyter: SandboxFusion's Jupyter mode, cells run in order in one
//     Python kernel, each cell's stdout, stderr, rich outputs (display) and
//     errors answered apart (jupyter.go). Not a FnCall: each call creates a
//     sandbox of the code interpreter's image (Options.Sandboxes,
//     Options.JupyterImage), runs jupyter/driver.py in it and deletes it.
//   - GET /v1/ping: "pong" (only where the handler is mounted at the root, i.e. on
//     the optional token-less listener).
//
// Limits are SandboxFusion's: memory_limit_MB (when > 0) is also the stack
// limit, compile_timeout bounds the compile (TimeLimitExceeded, nothing runs),
// run_timeout the run.
//
// A program's failure is a 200 with status "Failed"; dsec's own failure is a 200
// with status "SandboxError" (as SandboxFusion answers); malformed requests are a
// 4xx with a JSON `detail`, as FastAPI answers them. A call that finds no free
// FnCall slot waits (a bounded queue, a wait budget) and is answered 504 past
// it: never 429 or 503, which SandboxFusion's clients score as a wrong answer.
package sandboxfusion

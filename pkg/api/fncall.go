package api

// FnCall: online-judge style runs (POST /v1/fncall, POST /v1/fncall/batch). Each
// test of a call runs in a fresh, strictly limited process sandbox from a warm
// pool; the result says exactly what happened with a verdict per test.

// FnCall languages. A raw command (FnCallRequest.Cmd) needs no language.
const (
	LangPython3 = "python3"
	LangC       = "c"
	LangCPP     = "c++"
	LangGo      = "go"
	LangBash    = "bash"
	// SandboxFusion's languages from Debian packages (the judge image's
	// scripts/judge-language-packages.txt), with SandboxFusion's commands.
	LangNodeJS = "nodejs"
	LangPHP    = "php"
	LangRuby   = "ruby"
	LangLua    = "lua"
	LangPerl   = "perl"
	LangRust   = "rust"
	// JVM, .NET and the other toolchains of scripts/judge-language-packages.txt.
	LangJava         = "java"
	LangJUnit        = "junit" // every .java file compiled, its test classes run by JUnit 5
	LangPytest       = "pytest"
	LangTypeScript   = "typescript"
	LangKotlinScript = "kotlin_script"
	LangScala        = "scala"
	LangR            = "r"
	LangCSharp       = "csharp"
	LangRacket       = "racket"
	LangD            = "d"
	LangVerilog      = "verilog"
)

// Verdicts.
const (
	VerdictAccepted     = "accepted"
	VerdictWrongAnswer  = "wrong_answer"
	VerdictTimeLimit    = "time_limit"
	VerdictMemoryLimit  = "memory_limit"
	VerdictRuntimeError = "runtime_error"
	VerdictOutputLimit  = "output_limit"
	VerdictCompileError = "compile_error"
	VerdictSystemError  = "system_error"
)

// Comparison modes.
const (
	CompareExact    = "exact"
	CompareTrailing = "ignore_trailing_whitespace" // per line and at the end (default)
	CompareFloat    = "float"                      // token-wise, numbers within epsilon
)

// FnCallRequest is the body of POST /v1/fncall.
type FnCallRequest struct {
	// Language is one of the Lang constants above; empty when Cmd is set.
	Language string `json:"language,omitempty"`
	// Cmd is a raw command (argv) run in the work directory /w instead of a
	// language's runner; the files are placed in /w.
	Cmd []string `json:"cmd,omitempty"`
	// Files are the sources (and any data files), by path relative to /w. The
	// program is main.<ext> (main.py, main.c, main.cpp, main.go, main.sh) or the
	// only source file of the language.
	Files map[string]string `json:"files,omitempty"`
	// Tests are run one fresh sandbox each; at least one.
	Tests []FnCallTest `json:"tests"`
	// Limits apply to every test run (compiles have their own, generous ones).
	Limits FnCallLimits `json:"limits,omitzero"`
	// Env is added to the program's environment.
	Env map[string]string `json:"env,omitempty"`
	// Image is the environment; empty means "judge".
	Image string `json:"image,omitempty"`
	// Device is reserved for accelerators (e.g. "gpu"); only "" and "cpu" are
	// accepted today.
	Device string `json:"device,omitempty"`
}

// FnCallTest is one input and, optionally, the expected output.
type FnCallTest struct {
	Stdin string `json:"stdin,omitempty"`
	// ExpectedOutput, when set, is compared with stdout; without it a test that
	// runs cleanly is accepted.
	ExpectedOutput *string        `json:"expected_output,omitempty"`
	Compare        *FnCallCompare `json:"compare,omitempty"`
}

// FnCallCompare selects how stdout is compared with the expected output.
type FnCallCompare struct {
	// Mode is exact, ignore_trailing_whitespace (default) or float.
	Mode string `json:"mode,omitempty"`
	// Epsilon is the float mode's tolerance: two numbers match when they differ
	// by at most Epsilon absolutely or relatively (default 1e-6). Non-numeric
	// tokens must match exactly.
	Epsilon float64 `json:"epsilon,omitempty"`
}

// FnCallLimits bound one test run. Zero fields take the defaults.
type FnCallLimits struct {
	// CPUTimeMs is the CPU time of all the run's processes (default 2000).
	CPUTimeMs int64 `json:"cpu_time_ms,omitempty"`
	// WallTimeMs is the real time (default 2 x CPUTimeMs + 1000).
	WallTimeMs int64 `json:"wall_time_ms,omitempty"`
	// MemoryBytes is the memory cgroup limit, work directory files included
	// (default 256 MiB).
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// Processes limits processes and threads (default 64).
	Processes int64 `json:"processes,omitempty"`
	// OutputBytes limits stdout (default 1 MiB); stderr is truncated to it
	// without a verdict.
	OutputBytes int64 `json:"output_bytes,omitempty"`
	// FileSizeBytes limits each file the program writes (default 16 MiB).
	FileSizeBytes int64 `json:"file_size_bytes,omitempty"`
	// StackBytes is the program's stack size limit (RLIMIT_STACK; default the
	// node's, 8 MiB). SandboxFusion sets it to the memory limit, so deep
	// recursion in competitive-programming solutions does not crash.
	StackBytes int64 `json:"stack_bytes,omitempty"`
	// CompileTimeMs bounds the compile step's wall and CPU time (default 60000
	// CPU, 120000 wall). A compile beyond it is the compile verdict
	// time_limit and no test runs. A program compiled before (the compile
	// cache) is not compiled again, whatever the limit.
	CompileTimeMs int64 `json:"compile_time_ms,omitempty"`
}

// FnCallResult is the answer of POST /v1/fncall (and one NDJSON line of the batch
// form, with Index).
type FnCallResult struct {
	// Index is the call's position in a batch request.
	Index int `json:"index"`
	// Verdict summarises the call: compile_error, else the first test verdict that
	// is not accepted, else accepted.
	Verdict string             `json:"verdict"`
	Compile *FnCallCompile     `json:"compile,omitempty"`
	Tests   []FnCallTestResult `json:"tests"`
	// Error is set (with Verdict system_error or a 4xx API error in a batch line)
	// when the call could not be run at all.
	Error *Error `json:"error,omitempty"`
}

// FnCallCompile describes the compile step.
type FnCallCompile struct {
	// Verdict is accepted, compile_error, time_limit (limits.compile_time_ms) or
	// system_error.
	Verdict string `json:"verdict"`
	// Cached says the result came from the compile cache (same language, flags
	// and sources).
	Cached     bool    `json:"cached,omitempty"`
	Output     string  `json:"output,omitempty"` // compiler diagnostics (truncated)
	ExitCode   int     `json:"exit_code"`
	WallTimeMs float64 `json:"wall_time_ms"`
	CPUTimeMs  float64 `json:"cpu_time_ms"`
	Message    string  `json:"message,omitempty"`
}

// FnCallTestResult is one test's outcome.
type FnCallTestResult struct {
	Verdict string `json:"verdict"`
	// TimeLimit says which limit a time_limit verdict hit: "cpu" or "wall".
	TimeLimit string `json:"time_limit,omitempty"`
	// ExitCode is the exit status, -1 when a signal ended the program.
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	// CPUTimeMs, WallTimeMs and PeakMemoryBytes are measured by the kernel
	// (rusage of the run's whole process tree; peak is the largest RSS).
	CPUTimeMs       float64 `json:"cpu_time_ms"`
	WallTimeMs      float64 `json:"wall_time_ms"`
	PeakMemoryBytes int64   `json:"peak_memory_bytes"`
	// LimitHit is set with a memory_limit verdict: the run hit its memory
	// limit. PeakMemoryBytes is still the measured peak, which can be below
	// the limit (the kernel kills at the cgroup's limit, rusage counts RSS).
	LimitHit        bool   `json:"limit_hit,omitempty"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	// Message explains the verdict (first difference, the limit hit, the
	// infrastructure failure).
	Message string `json:"message,omitempty"`
}

// FnCallBatchRequest is the body of POST /v1/fncall/batch; the response streams one
// FnCallResult per call as NDJSON, in completion order, each with its Index.
type FnCallBatchRequest struct {
	Calls []FnCallRequest `json:"calls"`
}

package sandboxfusion

// RunCodeRequest is the body of POST /run_code.
type RunCodeRequest struct {
	CompileTimeout *float64 `json:"compile_timeout"`
	RunTimeout     *float64 `json:"run_timeout"`
	MemoryLimitMB  *int64   `json:"memory_limit_MB"`
	Code           *string  `json:"code"`
	Stdin          *string  `json:"stdin"`
	Language       string   `json:"language"`
	// Files maps a path (relative to the work directory) to base64 content; a
	// null value is skipped.
	Files      map[string]*string `json:"files"`
	FetchFiles []string           `json:"fetch_files"`
}

// Run statuses of a RunCodeResponse.
const (
	StatusSuccess      = "Success"
	StatusFailed       = "Failed"
	StatusSandboxError = "SandboxError"
)

// Command statuses of a CommandRunResult.
const (
	CmdFinished  = "Finished"
	CmdError     = "Error"
	CmdTimeLimit = "TimeLimitExceeded"
)

// RunCodeResponse is the answer of POST /run_code.
type RunCodeResponse struct {
	Status          string            `json:"status"`
	Message         string            `json:"message"`
	CompileResult   *CommandRunResult `json:"compile_result"`
	RunResult       *CommandRunResult `json:"run_result"`
	ExecutorPodName *string           `json:"executor_pod_name"`
	Files           map[string]string `json:"files"`
}

// CommandRunResult is one command's outcome (compile or run).
type CommandRunResult struct {
	Status string `json:"status"`
	// ExecutionTime is the wall time in seconds.
	ExecutionTime *float64 `json:"execution_time"`
	// ReturnCode is the exit status, -N for a signal N, null after a timeout.
	ReturnCode *int    `json:"return_code"`
	Stdout     *string `json:"stdout"`
	Stderr     *string `json:"stderr"`
}

// SubmitRequest is the body of POST /submit.
type SubmitRequest struct {
	Dataset    string     `json:"dataset"`
	ID         any        `json:"id"`
	Completion *string    `json:"completion"`
	Config     TestConfig `json:"config"`
}

// TestConfig is a submission's config (the fields dsec honours; the others are
// accepted and ignored).
type TestConfig struct {
	DatasetType        *string        `json:"dataset_type"`
	Language           string         `json:"language"`
	Locale             *string        `json:"locale"`
	IsFewshot          *bool          `json:"is_fewshot"`
	CompileTimeout     *float64       `json:"compile_timeout"`
	RunTimeout         *float64       `json:"run_timeout"`
	CustomExtractLogic *string        `json:"custom_extract_logic"`
	ProvidedData       any            `json:"provided_data"`
	Extra              map[string]any `json:"extra"`
}

// StdioTest is one test case: stdin in, stdout expected.
type StdioTest struct {
	Input  map[string]string `json:"input"`
	Output map[string]string `json:"output"`
}

// EvalTestCase is one case's outcome in an EvalResult.
type EvalTestCase struct {
	Passed   bool            `json:"passed"`
	ExecInfo RunCodeResponse `json:"exec_info"`
	TestInfo *StdioTest      `json:"test_info"`
}

// EvalResult is the answer of POST /submit.
type EvalResult struct {
	ID            any            `json:"id"`
	Accepted      bool           `json:"accepted"`
	ExtractedCode string         `json:"extracted_code"`
	FullCode      *string        `json:"full_code"`
	TestCode      *string        `json:"test_code"`
	Tests         []EvalTestCase `json:"tests"`
	ExtractedType *string        `json:"extracted_type"`
	Extra         map[string]any `json:"extra"`
}

// errorBody is FastAPI's error shape.
type errorBody struct {
	Detail string `json:"detail"`
}

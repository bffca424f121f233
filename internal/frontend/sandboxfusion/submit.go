package sandboxfusion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// commonOJ is the one dataset class dsec judges: stdio cases given inline.
const commonOJ = "CommonOJDataset"

// truncateAt is where SandboxFusion shortens a passed case's data in test_info.
const truncateAt = 1000

// evaluate judges a completion against config.provided_data's stdio cases.
func (h *Handler) evaluate(ctx context.Context, req SubmitRequest) (EvalResult, error) {
	cfg := req.Config
	if cfg.DatasetType == nil || *cfg.DatasetType != commonOJ {
		if cfg.DatasetType != nil {
			return EvalResult{}, errdefs.Invalid("eval class %s not found: dsec serves only %s with config.provided_data", *cfg.DatasetType, commonOJ)
		}
		return EvalResult{}, errdefs.Invalid("no eval class found for dataset %s: dsec has no dataset database; set config.dataset_type=%s and give the cases in config.provided_data", req.Dataset, commonOJ)
	}
	if cfg.Language == "" {
		return EvalResult{}, errdefs.Invalid("config.language field must exist for %s, got None", commonOJ)
	}
	if cfg.CustomExtractLogic != nil {
		return EvalResult{}, errdefs.Invalid("config.custom_extract_logic is not supported: dsec extracts code with SandboxFusion's default extractor only")
	}
	if req.Completion == nil {
		return EvalResult{}, errdefs.Invalid("completion is required")
	}
	cases, err := stdioCases(cfg.ProvidedData)
	if err != nil {
		return EvalResult{}, err
	}
	code, kind := extractCode(*req.Completion, cfg.Language)
	run := RunCodeRequest{Code: &code, Language: cfg.Language, CompileTimeout: cfg.CompileTimeout, RunTimeout: cfg.RunTimeout}
	if !slices.Contains(compileLanguages, cfg.Language) {
		// SandboxFusion's other languages: its default compile timeout,
		// 20 s to run unless configured.
		run.CompileTimeout = nil
		if run.RunTimeout == nil {
			run.RunTimeout = ptr(20.0)
		}
	}
	var res api.FnCallResult
	var fixed *RunCodeResponse // every case's answer, when nothing runs
	fr, err := h.fnCallRequest(run)
	switch {
	case errors.Is(err, errNoScalaObject):
		fixed = ptr(noScalaObject())
	case err != nil:
		return EvalResult{}, err
	default:
		fr.Tests = make([]api.FnCallTest, len(cases))
		for i, c := range cases {
			fr.Tests[i] = api.FnCallTest{Stdin: c.Input["stdin"]}
		}
		res, err = h.fc.FnCall(ctx, fr)
		if r, ok := noGPU(cfg.Language, fr, err); ok {
			fixed = &r
		} else if err != nil {
			return EvalResult{}, err
		}
	}
	out := EvalResult{ID: req.ID, ExtractedCode: code, ExtractedType: &kind, Tests: []EvalTestCase{}, Accepted: true}
	runAll, _ := cfg.Extra["run_all_cases"].(bool)
	fullCase, _ := cfg.Extra["return_full_case"].(bool)
	for i, c := range cases {
		var test *api.FnCallTestResult
		if i < len(res.Tests) {
			test = &res.Tests[i]
		}
		exec := response(res, test)
		if fixed != nil {
			exec = *fixed
		}
		passed := exec.Status == StatusSuccess && exec.RunResult != nil &&
			stdoutMatches(deref(exec.RunResult.Stdout), c.Output["stdout"])
		info := c
		if passed && !fullCase {
			info = truncated(c)
		}
		out.Tests = append(out.Tests, EvalTestCase{Passed: passed, ExecInfo: exec, TestInfo: &info})
		if !passed {
			out.Accepted = false
			if !runAll {
				break
			}
		}
	}
	return out, nil
}

// stdioCases reads provided_data as SandboxFusion's get_row_by_id does: a row (an
// object) whose "test" column is a list of cases or that list as a JSON string.
func stdioCases(data any) ([]StdioTest, error) {
	row, ok := data.(map[string]any)
	if !ok {
		return nil, errdefs.Invalid("config.provided_data must be an object with a \"test\" list of {input: {stdin}, output: {stdout}}")
	}
	raw, ok := row["test"]
	if !ok {
		return nil, errdefs.Invalid("config.provided_data has no \"test\" field")
	}
	var b []byte
	if s, isStr := raw.(string); isStr {
		b = lenientJSON(s)
	} else {
		var err error
		if b, err = json.Marshal(raw); err != nil {
			return nil, errdefs.Invalid("config.provided_data.test: %v", err)
		}
	}
	var cases []StdioTest
	if err := json.Unmarshal(b, &cases); err != nil {
		return nil, errdefs.Invalid("config.provided_data.test must be a list of {input: {stdin: str}, output: {stdout: str}}: %v", err)
	}
	if len(cases) == 0 {
		return nil, errdefs.Invalid("config.provided_data.test has no cases")
	}
	for i, c := range cases {
		if _, ok := c.Input["stdin"]; !ok {
			return nil, errdefs.Invalid("config.provided_data.test[%d].input has no stdin", i)
		}
		if _, ok := c.Output["stdout"]; !ok {
			return nil, errdefs.Invalid("config.provided_data.test[%d].output has no stdout", i)
		}
	}
	return cases, nil
}

// stdoutMatches compares as SandboxFusion's check_stdio_test_case: both sides
// trimmed and split into lines (one trailing empty line forgiven), each line
// trimmed and compared case-insensitively, numbers within a relative 1e-5.
func stdoutMatches(got, want string) bool {
	g := strings.Split(strings.TrimSpace(got), "\n")
	w := strings.Split(strings.TrimSpace(want), "\n")
	if len(g)-len(w) == 1 && g[len(g)-1] == "" {
		g = g[:len(g)-1]
	}
	if len(w)-len(g) == 1 && w[len(w)-1] == "" {
		w = w[:len(w)-1]
	}
	if len(g) != len(w) {
		return false
	}
	for i := range g {
		gl, wl := strings.TrimSpace(strings.ToLower(g[i])), strings.TrimSpace(strings.ToLower(w[i]))
		if gl == wl {
			continue
		}
		a, errA := strconv.ParseFloat(gl, 64)
		b, errB := strconv.ParseFloat(wl, 64)
		if errA != nil || errB != nil || !(math.Abs(a-b)/math.Max(math.Abs(b), 1e-10) < 1e-5) {
			return false
		}
	}
	return true
}

// truncated shortens every stdin/stdout of a case as SandboxFusion's
// truncate_str does for cases that passed: a text longer than truncateAt
// characters (Unicode code points, as Python counts them) keeps 498 at each end
// with "..." between; a character is never cut.
func truncated(c StdioTest) StdioTest {
	const placeholder = "..."
	keep := (truncateAt - len(placeholder)) / 2
	short := func(m map[string]string) map[string]string {
		out := make(map[string]string, len(m))
		for k, v := range m {
			if r := []rune(v); len(r) > truncateAt {
				v = string(r[:keep]) + placeholder + string(r[len(r)-keep:])
			}
			out[k] = v
		}
		return out
	}
	return StdioTest{Input: short(c.Input), Output: short(c.Output)}
}

// lenientJSON prepares a JSON text for encoding/json as Python's
// json.loads(s, strict=False) reads it: control characters (raw newlines,
// tabs, ...) inside strings are allowed there, so they are escaped here.
func lenientJSON(s string) []byte {
	b := make([]byte, 0, len(s))
	inString, escaped := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case !inString:
			inString = c == '"'
		case escaped:
			escaped = false
		case c == '\\':
			escaped = true
		case c == '"':
			inString = false
		case c < 0x20:
			b = fmt.Appendf(b, "\\u%04x", c)
			continue
		}
		b = append(b, c)
	}
	return b
}

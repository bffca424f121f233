package sandboxfusion

import (
	"encoding/base64"
	"errors"
	"math"
	"path"
	"regexp"
	"sort"
	"strings"
	"unicode"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// language is how one SandboxFusion language runs on dsec's judge image.
type language struct {
	fncall string            // FnCall language ("": cmd runs instead)
	main   string            // the program's file name
	cmd    []string          // a raw command run in the work directory, for modes FnCall has no language for
	env    map[string]string // cmd's environment
	jest   bool              // runs in Options.JestImage instead of Options.Image
	device string            // FnCall device ("": cpu; gpu.go)
}

// languages are the SandboxFusion languages dsec's judge image has
// (scripts/judge-language-packages.txt).
var languages = map[string]language{
	"python":        {fncall: api.LangPython3, main: "main.py"},
	"pytest":        {fncall: api.LangPytest, main: "main.py"},
	"cpp":           {fncall: api.LangCPP, main: "main.cpp"},
	"go":            {fncall: api.LangGo, main: "main.go"},
	"bash":          {fncall: api.LangBash, main: "main.sh"},
	"nodejs":        {fncall: api.LangNodeJS, main: "main.js"},
	"php":           {fncall: api.LangPHP, main: "main.php"},
	"ruby":          {fncall: api.LangRuby, main: "main.rb"},
	"lua":           {fncall: api.LangLua, main: "main.lua"},
	"perl":          {fncall: api.LangPerl, main: "main.pl"},
	"rust":          {fncall: api.LangRust, main: "main.rs"},
	"java":          {fncall: api.LangJava, main: "Main.java"}, // SandboxFusion's file: class Main
	"junit":         {fncall: api.LangJUnit, main: ""},         // PUBLICCLASS.java: see javaPublicClass
	"typescript":    {fncall: api.LangTypeScript, main: "main.ts"},
	"kotlin_script": {fncall: api.LangKotlinScript, main: "main.kts"},
	"scala":         {fncall: api.LangScala, main: ""}, // OBJECT.scala: see scalaObject
	"R":             {fncall: api.LangR, main: "main.R"},
	"csharp":        {fncall: api.LangCSharp, main: "Program.cs"},
	"racket":        {fncall: api.LangRacket, main: "main.rkt"},
	"D_ut":          {fncall: api.LangD, main: "main.d"},
	"verilog":       {fncall: api.LangVerilog, main: "main.sv"},
	// go test F_test.go (runners/major.py run_go_test): no compile step, the
	// build is part of the run and of run_timeout, as there.
	"go_test": {main: "main_test.go", cmd: []string{"/usr/bin/go", "test", "main_test.go"}, env: goTestEnv},
	// SandboxFusion lists sql but has no runner for it (its /run_code answers
	// a SandboxError); here the script runs on an in-memory SQLite database
	// and prints as the sqlite3 shell does (sqlDriver).
	"sql": {main: "main.sql", cmd: []string{"/usr/bin/python3", "-I", "-c", sqlDriver, "main.sql"}},
	// npm run test in SandboxFusion's npm project (runners/major.py
	// run_jest): the code is a TypeScript test file, run by jest with Babel's
	// presets; jest exits 1 when a test fails or the file does not compile.
	"jest": {main: "main.test.ts", cmd: []string{"/bin/sh", "-c", jestRun}, env: map[string]string{"FORCE_COLOR": "0"}, jest: true},
}

// DefaultJestImage is the image jest runs in (scripts/jest-image.sh: the
// judge image plus SandboxFusion's npm project in jestProject).
const DefaultJestImage = "sandboxfusion-jest"

// jestProject is where DefaultJestImage holds the npm project
// (scripts/sandboxfusion-jest: package.json, babel.config.js, node_modules).
const jestProject = "/opt/sandboxfusion/node"

// jestRun is what `npm run test` does in SandboxFusion's work directory, in
// which node_modules, package.json and babel.config.js are links to the
// project: npm's banner on stdout, then jest (its configuration in
// package.json: at most 2 workers, jest-json-reporter writing
// jest-report.json). jest is started directly, without npm's own start (0.1-0.2 s).
const jestRun = "ln -s " + jestProject + "/node_modules " + jestProject + "/package.json " + jestProject + "/babel.config.js . &&\n" +
	"printf '\\n> coderunner@1.0.0 test\\n> FORCE_COLOR=0 jest\\n\\n' &&\n" +
	"exec /usr/bin/node node_modules/jest/bin/jest.js"

// goTestEnv is Go's GOPATH mode with Debian's Go libraries (golang-*-dev
// packages in /usr/share/gocode) importable, and the build cache in the work
// directory; nothing is downloaded.
var goTestEnv = map[string]string{"GOCACHE": "/w/.cache/go-build", "GOPATH": "/usr/share/gocode",
	"GO111MODULE": "off", "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false", "GOPROXY": "off"}

// sqlDriver runs the SQL script named by its argument as the sqlite3 shell
// runs `sqlite3 < F` on an in-memory database: statement by statement, rows
// in list mode (columns joined by "|", NULL empty, reals as "%!.15g"), an
// error reported on stderr and the script going on, exit status 1 after any
// error. It uses Python's sqlite3 module (the judge image has no sqlite3 shell).
const sqlDriver = `import sqlite3, sys
src = open(sys.argv[1], encoding="utf-8", errors="replace").read()
db = sqlite3.connect(":memory:", isolation_level=None)
out = sys.stdout.buffer
def cell(v):
    if v is None:
        return b""
    if isinstance(v, bytes):
        return v
    if isinstance(v, float):
        if v != v:
            return b""
        if v in (float("inf"), float("-inf")):
            return b"Inf" if v > 0 else b"-Inf"
        m, e, x = ("%.15g" % v).partition("e")
        if "." not in m:
            m += ".0"
        return (m + e + x).encode()
    return str(v).encode("utf-8", "surrogateescape")
failed = False
def run(stmt, line):
    global failed
    try:
        for row in db.execute(stmt):
            out.write(b"|".join(cell(v) for v in row) + b"\n")
    except sqlite3.Error as e:
        out.flush()
        sys.stderr.write("Error: near line %d: %s\n" % (line, e))
        failed = True
start = 0
for i, ch in enumerate(src):
    if ch == ";" and sqlite3.complete_statement(src[start:i + 1]):
        stmt = src[start:i + 1]
        lead = len(stmt) - len(stmt.lstrip())
        run(stmt, src.count("\n", 0, start + lead) + 1)
        start = i + 1
rest = src[start:]
if rest.strip():
    run(rest, src.count("\n", 0, start + len(rest) - len(rest.lstrip())) + 1)
out.flush()
sys.exit(1 if failed else 0)
`

// knownLanguages are SandboxFusion's other languages: valid there, not here
// (toolchains Debian does not package).
var knownLanguages = []string{"julia", "lean", "swift"}

// compileLanguages are the ones SandboxFusion's /submit gives a compile
// timeout and a 10 s (not 20 s) default run timeout (runners/types.py).
var compileLanguages = []string{"cpp", "go", "java"}

// javaPublicClassRE is SandboxFusion's find_java_public_class_name pattern.
var javaPublicClassRE = regexp.MustCompile(`\bpublic\s+(abstract\s+|final\s+)?class\s+(\w+)`)

// javaPublicClass names a JUnit program's file as SandboxFusion does: after
// its first public class, else Main.
func javaPublicClass(code string) string {
	if m := javaPublicClassRE.FindStringSubmatch(code); m != nil {
		return m[2]
	}
	return "Main"
}

// scalaObjectRE is SandboxFusion's find_scala_classname pattern.
var scalaObjectRE = regexp.MustCompile(`object\s+(\w+)(\s*)|(\s+extends\s+\w+\s*){`)

// scalaObject is the object a Scala program runs, as SandboxFusion picks
// it: the first `object NAME`, "" when there is none or the first match is
// an `extends ... {` instead.
func scalaObject(code string) string {
	m := scalaObjectRE.FindStringSubmatch(code)
	if m == nil {
		return ""
	}
	return m[1]
}

// errNoScalaObject stands for noScalaObject's answer until the handler gives it.
var errNoScalaObject = errors.New("scala: object name not found")

// noScalaObject is SandboxFusion's answer to Scala code without an object:
// a compile result with status Error, hence a SandboxError.
func noScalaObject() RunCodeResponse {
	const msg = "Object name not found."
	return RunCodeResponse{Status: StatusSandboxError, Message: msg, Files: map[string]string{},
		CompileResult: &CommandRunResult{Status: CmdError, ReturnCode: ptr(1), Stderr: ptr(msg)}}
}

// Defaults of SandboxFusion's RunCodeRequest.
const (
	defaultRunTimeout = 10.0
	maxTimeout        = 3600.0
)

func supported() string {
	names := make([]string, 0, len(languages))
	for n := range languages {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func lookupLanguage(name string) (language, error) {
	if l, ok := languages[name]; ok {
		return l, nil
	}
	if l, ok := gpuLanguages[name]; ok {
		return l, nil
	}
	for _, k := range knownLanguages {
		if k == name {
			return language{}, errdefs.Invalid("unsupported language %q: dsec's judge image runs %s", name, supported())
		}
	}
	if name == "" {
		return language{}, errdefs.Invalid("language is required (one of %s)", supported())
	}
	return language{}, errdefs.Invalid("unknown language %q (dsec runs %s)", name, supported())
}

// timeoutMs converts a SandboxFusion timeout in seconds (nil: def).
func timeoutMs(field string, v *float64, def float64) (int64, error) {
	t := def
	if v != nil {
		t = *v
	}
	if math.IsNaN(t) || t <= 0 || t > maxTimeout {
		return 0, errdefs.Invalid("%s must be in (0, %g] seconds, got %g", field, maxTimeout, t)
	}
	return int64(math.Ceil(t * 1000)), nil
}

// fnCallRequest maps a RunCodeRequest onto one FnCall test.
func (h *Handler) fnCallRequest(req RunCodeRequest) (api.FnCallRequest, error) {
	lang, err := lookupLanguage(req.Language)
	if err != nil {
		return api.FnCallRequest{}, err
	}
	if req.Code == nil {
		return api.FnCallRequest{}, errdefs.Invalid("code is required")
	}
	if len(req.FetchFiles) > 0 {
		return api.FnCallRequest{}, errdefs.Invalid("fetch_files is not supported: a FnCall run's work directory ends with its sandbox")
	}
	compileMs, err := timeoutMs("compile_timeout", req.CompileTimeout, defaultRunTimeout)
	if err != nil {
		return api.FnCallRequest{}, err
	}
	runMs, err := timeoutMs("run_timeout", req.RunTimeout, defaultRunTimeout)
	if err != nil {
		return api.FnCallRequest{}, err
	}
	// SandboxFusion applies memory_limit_MB (when > 0) as RLIMIT_AS, RLIMIT_DATA
	// and RLIMIT_STACK; dsec applies it as the memory cgroup and the stack
	// limit. Without one, SandboxFusion's program keeps the default stack.
	mem, stack := h.opts.DefaultMemoryBytes, int64(0)
	if req.MemoryLimitMB != nil && *req.MemoryLimitMB > 0 {
		if *req.MemoryLimitMB > 1<<20 {
			return api.FnCallRequest{}, errdefs.Invalid("memory_limit_MB %d is too large", *req.MemoryLimitMB)
		}
		mem = *req.MemoryLimitMB << 20
		stack = mem
	}
	code := *req.Code
	switch req.Language {
	case "php":
		code = phpTagged(code)
	case "scala": // scalac, then scala OBJECT: FnCall runs the object its file is named after
		obj := scalaObject(code)
		if obj == "" {
			return api.FnCallRequest{}, errNoScalaObject
		}
		lang.main = obj + ".scala"
	case "junit": // javac *.java: the file must be named after its public class
		lang.main = javaPublicClass(code) + ".java"
	}
	files := map[string]string{lang.main: code}
	for p, content := range req.Files {
		if content == nil {
			continue
		}
		name := path.Clean(p)
		if path.IsAbs(name) || name == "." || name == ".." || strings.HasPrefix(name, "../") {
			return api.FnCallRequest{}, errdefs.Invalid("files: %q must be a path inside the work directory", p)
		}
		if name == lang.main {
			return api.FnCallRequest{}, errdefs.Invalid("files: %q is the program's own file name", p)
		}
		b, err := base64.StdEncoding.DecodeString(*content)
		if err != nil {
			return api.FnCallRequest{}, errdefs.Invalid("files[%q]: not base64: %v", p, err)
		}
		files[name] = string(b)
	}
	stdin := ""
	if req.Stdin != nil {
		stdin = *req.Stdin
	}
	img := h.opts.Image
	if lang.jest {
		img = h.opts.JestImage
	}
	return api.FnCallRequest{
		Language: lang.fncall, Cmd: lang.cmd, Env: lang.env, Files: files, Image: img, Device: lang.device,
		Tests: []api.FnCallTest{{Stdin: stdin}},
		Limits: api.FnCallLimits{CPUTimeMs: runMs, WallTimeMs: runMs, MemoryBytes: mem, OutputBytes: h.opts.OutputBytes,
			StackBytes: stack, CompileTimeMs: compileMs},
	}, nil
}

// response maps a FnCall result (and the one test that stands for this run) to
// SandboxFusion's answer, with its status rules: an Error anywhere is a
// SandboxError, a timeout or a non-zero return code is Failed, else Success.
func response(res api.FnCallResult, test *api.FnCallTestResult) RunCodeResponse {
	out := RunCodeResponse{Status: StatusSuccess, Files: map[string]string{}}
	if res.Compile != nil {
		out.CompileResult = compileResult(res.Compile)
	}
	if test != nil {
		out.RunResult = runResult(test)
	}
	if res.Verdict == api.VerdictSystemError && test == nil && (res.Compile == nil || res.Compile.Verdict != api.VerdictSystemError) {
		msg := "dsec could not run the program"
		if res.Error != nil {
			msg = res.Error.Message
		}
		out.Status, out.Message = StatusSandboxError, msg
		return out
	}
	for _, c := range []*CommandRunResult{out.CompileResult, out.RunResult} {
		if c != nil && c.Status == CmdError {
			out.Status, out.Message = StatusSandboxError, deref(c.Stderr)
			return out
		}
	}
	for _, c := range []*CommandRunResult{out.CompileResult, out.RunResult} {
		if c != nil && (c.Status == CmdTimeLimit || (c.ReturnCode != nil && *c.ReturnCode != 0)) {
			out.Status = StatusFailed
		}
	}
	return out
}

func compileResult(c *api.FnCallCompile) *CommandRunResult {
	r := &CommandRunResult{Status: CmdFinished, ExecutionTime: ptr(c.WallTimeMs / 1000),
		ReturnCode: ptr(c.ExitCode), Stdout: ptr(""), Stderr: ptr(c.Output)}
	switch c.Verdict {
	case api.VerdictSystemError:
		r.Status, r.ReturnCode = CmdError, nil
		r.Stderr = ptr(strings.TrimSpace(c.Message + "\n" + c.Output))
	case api.VerdictTimeLimit:
		r.Status, r.ReturnCode = CmdTimeLimit, nil
	case api.VerdictCompileError:
		if c.ExitCode == 0 { // killed or failed without an exit status
			r.ReturnCode = ptr(1)
		}
	}
	return r
}

func runResult(t *api.FnCallTestResult) *CommandRunResult {
	r := &CommandRunResult{Status: CmdFinished, ExecutionTime: ptr(t.WallTimeMs / 1000),
		ReturnCode: ptr(t.ExitCode), Stdout: ptr(t.Stdout), Stderr: ptr(t.Stderr)}
	switch t.Verdict {
	case api.VerdictTimeLimit:
		r.Status, r.ReturnCode = CmdTimeLimit, nil
	case api.VerdictSystemError:
		r.Status, r.ReturnCode = CmdError, nil
		r.Stderr = ptr(strings.TrimSpace(t.Message + "\n" + t.Stderr))
	default:
		if t.Signal != "" { // Python's convention, which SandboxFusion reports: -N
			if n := unix.SignalNum(t.Signal); n != 0 {
				r.ReturnCode = ptr(-int(n))
			}
		} else if t.Verdict != api.VerdictAccepted && t.ExitCode == 0 {
			// Killed at a limit without a status (memory, output): never 0.
			r.ReturnCode = ptr(-int(unix.SIGKILL))
		}
	}
	return r
}

// phpTagged is SandboxFusion's ensure_php_tag_in_string: PHP code that does not
// start (after leading space) with "<?php" gets it.
func phpTagged(code string) string {
	code = strings.TrimLeftFunc(code, unicode.IsSpace)
	if !strings.HasPrefix(code, "<?php") {
		code = "<?php\n" + code
	}
	return code
}

func ptr[T any](v T) *T { return &v }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

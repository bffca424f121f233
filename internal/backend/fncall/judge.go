package fncall

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Defaults and bounds of FnCallLimits.
const (
	DefaultCPUTimeMs   = 2000
	DefaultMemoryBytes = 256 << 20
	DefaultProcesses   = 64
	DefaultOutputBytes = 1 << 20
	DefaultFileSize    = 16 << 20

	MaxCPUTimeMs   = 60_000
	MaxWallTimeMs  = 120_000
	MaxMemoryBytes = 8 << 30
	MaxProcesses   = 4096
	MaxOutputBytes = 64 << 20
	MaxFileSize    = 1 << 30
	MaxTests       = 1000
	MaxFiles       = 32
)

// lang describes how a language compiles and runs. Paths are inside the image.
type lang struct {
	ext     []string // source extensions; the first is main's
	compile string   // shell command in /w writing the binary to /w/.out (diagnostics to stderr), %s for main; "" = interpreted
	env     []string // extra compile environment
	// run is the program's command line, given main's path in the work
	// directory (a JVM program's class is named after its file).
	run func(main string) []string
}

// compileCmd is the compile command for main: compile with %s (where one
// is) standing for main's quoted name.
func (lg lang) compileCmd(main string) string {
	if !strings.Contains(lg.compile, "%s") {
		return lg.compile
	}
	return fmt.Sprintf(lg.compile, shellQuote(main))
}

// interp runs main with an interpreter and its options.
func interp(argv ...string) func(string) []string {
	return func(m string) []string { return append(slices.Clone(argv), m) }
}

// compiled runs the compiled program through argv (none: the binary itself).
func compiled(argv ...string) func(string) []string {
	return func(string) []string {
		if len(argv) == 0 {
			return []string{binPath}
		}
		return append(slices.Clone(argv), binPath)
	}
}

// JVM programs compile to one jar (the one file FnCall's compile cache keeps)
// and run with the jar first on the class path.
const (
	javaTuples   = "/usr/share/java/javatuples.jar"
	junitJar     = "/usr/share/java/junit-platform-console-standalone.jar"
	scalaLibrary = "/usr/share/scala-2.11/lib/scala-library.jar"
	kotlinLib    = "/usr/share/kotlin/kotlinc/lib"
)

// tsTranspile strips TypeScript's types as SandboxFusion's tsx does: syntax
// errors fail (the compile error), type errors do not. It writes CommonJS.
const tsTranspile = `node -e 'const ts = require("typescript"), fs = require("fs"), f = process.argv[1];
const r = ts.transpileModule(fs.readFileSync(f, "utf8"), {fileName: f, reportDiagnostics: true,
  compilerOptions: {module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022, esModuleInterop: true}});
if (r.diagnostics.length) {
  process.stderr.write(ts.formatDiagnostics(r.diagnostics, {getCanonicalFileName: x => x, getCurrentDirectory: () => "/w", getNewLine: () => "\n"}));
  process.exit(1);
}
fs.writeFileSync("/w/.out", r.outputText);' %s`

var langs = map[string]lang{
	api.LangPython3: {ext: []string{".py"}, run: interp("/usr/bin/python3")},
	api.LangBash:    {ext: []string{".sh", ".bash"}, run: interp("/bin/bash")},
	// pytest F, with the judge image's Python packages (pytest-mock, pytest-cov).
	api.LangPytest: {ext: []string{".py"}, run: interp("/usr/bin/pytest")},
	api.LangC:      {ext: []string{".c"}, compile: "gcc -O2 -pipe -std=gnu17 -o /w/.out %s -lm", run: compiled()},
	api.LangCPP:    {ext: []string{".cpp", ".cc", ".cxx"}, compile: "g++ -O2 -pipe -std=gnu++17 -o /w/.out %s", run: compiled()},
	// SandboxFusion's commands (runners/major.py, minor.py): node F, php -f F,
	// ruby F, lua F, perl F, rustc F -o BIN (no optimisation, as there).
	api.LangNodeJS: {ext: []string{".js"}, run: interp("/usr/bin/node")},
	api.LangPHP:    {ext: []string{".php"}, run: interp("/usr/bin/php", "-f")},
	api.LangRuby:   {ext: []string{".rb"}, run: interp("/usr/bin/ruby")},
	api.LangLua:    {ext: []string{".lua"}, run: interp("/usr/bin/lua5.4")},
	api.LangPerl:   {ext: []string{".pl"}, run: interp("/usr/bin/perl")},
	api.LangRust:   {ext: []string{".rs"}, compile: "rustc -o /w/.out %s", run: compiled()},
	api.LangGo: {ext: []string{".go"}, compile: "go build -o /w/.out %s",
		env: []string{"GOCACHE=/w/.cache/go-build", "GOPATH=/w/go", "GO111MODULE=off", "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false"},
		run: compiled()},
	// javac -cp .:javatuples Main.java, then java -cp .:javatuples -ea Main;
	// the class is the file's name (SandboxFusion's is always Main.java).
	api.LangJava: {ext: []string{".java"},
		compile: "mkdir -p /w/tmp/classes && javac -encoding UTF-8 -cp " + javaTuples + " -d /w/tmp/classes %s && jar cf /w/.out -C /w/tmp/classes .",
		run: func(m string) []string {
			return []string{"/usr/bin/java", "-cp", binPath + ":" + javaTuples, "-ea", strings.TrimSuffix(path.Base(m), ".java")}
		}},
	// junit: javac -cp .:JUNIT *.java, then JUnit's console launcher on them
	// (java -jar JUNIT --class-path . --scan-class-path): every test class runs.
	api.LangJUnit: {ext: []string{".java"},
		compile: "mkdir -p /w/tmp/classes && javac -encoding UTF-8 -cp " + junitJar + " -d /w/tmp/classes *.java && jar cf /w/.out -C /w/tmp/classes .",
		// JUnit scans a class path entry for tests only when it is named *.jar.
		run: func(string) []string {
			return []string{"/bin/sh", "-c", "ln -s " + binPath + " /w/tmp/main.jar && exec /usr/bin/java -jar " + junitJar +
				" --scan-class-path --class-path /w/tmp/main.jar"}
		}},
	// tsx F: here the types are stripped once (tsTranspile), then node runs it.
	api.LangTypeScript: {ext: []string{".ts"}, compile: tsTranspile, run: compiled("/usr/bin/node")},
	// kotlin F.kts: Debian's Kotlin (1.3) runs scripts with kotlinc -script;
	// here its JVM command line, without the shell script around it (which
	// would turn the JVM's signals into exit codes).
	api.LangKotlinScript: {ext: []string{".kts"}, run: interp("/usr/bin/java", "-Xmx256M", "-Xms32M",
		"-cp", kotlinLib+"/kotlin-preloader.jar", "org.jetbrains.kotlin.preloading.Preloader",
		"-cp", kotlinLib+"/kotlin-compiler.jar", "org.jetbrains.kotlin.cli.jvm.K2JVMCompiler", "-script")},
	// scalac F, then scala OBJECT: the object the file is named after
	// (SandboxFusion's front end names it after the source's first object).
	api.LangScala: {ext: []string{".scala"}, compile: "scalac -d /w/tmp/main.jar %s && mv /w/tmp/main.jar /w/.out",
		run: func(m string) []string {
			return []string{"/usr/bin/java", "-cp", binPath + ":" + scalaLibrary, strings.TrimSuffix(path.Base(m), ".scala")}
		}},
	api.LangR: {ext: []string{".R", ".r"}, run: interp("/usr/bin/Rscript")},
	// dotnet run there; Mono's C# compiler and runtime here.
	api.LangCSharp: {ext: []string{".cs"}, compile: "mcs -out:/w/tmp/main.exe %s && mv /w/tmp/main.exe /w/.out", run: compiled("/usr/bin/mono")},
	api.LangRacket: {ext: []string{".rkt"}, run: interp("/usr/bin/racket")},
	// dmd F -unittest -of=BIN there; GCC's D front end with the same meaning:
	// a program with unittest blocks runs them and not main (druntime's
	// default test mode), one without runs main.
	api.LangD: {ext: []string{".d"}, compile: "gdc -funittest -o /w/.out %s", run: compiled()},
	// verilog-eval's commands, as SandboxFusion's: iverilog ... -s tb, vvp -n.
	api.LangVerilog: {ext: []string{".sv", ".v"}, compile: "iverilog -Wall -Winfloop -Wno-timescale -g2012 -s tb -o /w/.out %s",
		run: compiled("/usr/bin/vvp", "-n")},
}

// binPath is where a compiled program is placed in the run's work directory.
const binPath = "/w/.bin/main"

// Languages lists the supported languages.
func Languages() []string {
	l := make([]string, 0, len(langs))
	for k := range langs {
		l = append(l, k)
	}
	sort.Strings(l)
	return l
}

// Compile limits: generous, fixed (a compile is untrusted input too).
var compileLimits = Limits{CPU: 60 * time.Second, Wall: 120 * time.Second, Memory: 2 << 30, Procs: 256,
	Output: 256 << 20, Stderr: 64 << 10, FileSize: 512 << 20, Tmpfs: 1 << 30}

const baseEnv = "PATH=/usr/local/bin:/usr/bin:/bin"

// Validate checks a request without running anything.
func Validate(req *api.FnCallRequest) error {
	switch {
	case req.Language == "" && len(req.Cmd) == 0:
		return errdefs.Invalid("one of language and cmd is required")
	case req.Language != "" && len(req.Cmd) > 0:
		return errdefs.Invalid("language and cmd are mutually exclusive")
	case len(req.Tests) == 0:
		return errdefs.Invalid("tests: at least one test is required")
	case len(req.Tests) > MaxTests:
		return errdefs.Invalid("tests: at most %d tests", MaxTests)
	case len(req.Files) > MaxFiles:
		return errdefs.Invalid("files: at most %d files", MaxFiles)
	case req.Device != "" && req.Device != "cpu":
		return errdefs.New(api.CodeNotImplemented, "device %q is not available on this node (only cpu)", req.Device)
	}
	if req.Language != "" {
		if _, ok := langs[req.Language]; !ok {
			return errdefs.Invalid("language %q is not one of %s", req.Language, strings.Join(Languages(), ", "))
		}
	}
	if len(req.Cmd) > 0 && req.Cmd[0] == "" {
		return errdefs.Invalid("cmd[0] (the program) is empty")
	}
	for i, a := range req.Cmd {
		if strings.IndexByte(a, 0) >= 0 {
			return errdefs.Invalid("cmd[%d] contains a NUL byte", i)
		}
	}
	for name := range req.Files {
		if err := checkFileName(name); err != nil {
			return err
		}
	}
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return errdefs.Invalid("env: invalid variable %q", k)
		}
	}
	l := req.Limits
	for _, c := range []struct {
		name   string
		v, max int64
	}{
		{"cpu_time_ms", l.CPUTimeMs, MaxCPUTimeMs}, {"wall_time_ms", l.WallTimeMs, MaxWallTimeMs},
		{"memory_bytes", l.MemoryBytes, MaxMemoryBytes}, {"processes", l.Processes, MaxProcesses},
		{"output_bytes", l.OutputBytes, MaxOutputBytes}, {"file_size_bytes", l.FileSizeBytes, MaxFileSize},
		{"stack_bytes", l.StackBytes, MaxMemoryBytes}, {"compile_time_ms", l.CompileTimeMs, MaxWallTimeMs},
	} {
		if c.v < 0 || c.v > c.max {
			return errdefs.Invalid("limits.%s = %d: must be between 0 (default) and %d", c.name, c.v, c.max)
		}
	}
	if l.MemoryBytes != 0 && l.MemoryBytes < 4<<20 {
		return errdefs.Invalid("limits.memory_bytes = %d: below the minimum of 4 MiB", l.MemoryBytes)
	}
	for i, t := range req.Tests {
		if t.Compare == nil {
			continue
		}
		switch t.Compare.Mode {
		case "", api.CompareExact, api.CompareTrailing, api.CompareFloat:
		default:
			return errdefs.Invalid("tests[%d].compare.mode %q is not one of exact, ignore_trailing_whitespace, float", i, t.Compare.Mode)
		}
		if e := t.Compare.Epsilon; e < 0 || math.IsNaN(e) || math.IsInf(e, 0) {
			return errdefs.Invalid("tests[%d].compare.epsilon must be a finite number >= 0", i)
		}
	}
	if req.Language != "" {
		if _, err := mainFile(req); err != nil {
			return err
		}
	}
	return nil
}

func checkFileName(name string) error {
	switch {
	case name == "" || len(name) > 255 || path.IsAbs(name) || path.Clean(name) != name || name == "." ||
		strings.HasPrefix(name, "../") || name == ".." || strings.ContainsAny(name, "\x00:\\"):
		return errdefs.Invalid("files: invalid name %q (want a clean relative path)", name)
	case strings.HasPrefix(name, ".bin/") || name == ".bin" || name == ".out" || name == "tmp" || strings.HasPrefix(name, "tmp/"):
		return errdefs.Invalid("files: name %q is reserved", name)
	case !utf8.ValidString(name):
		return errdefs.Invalid("files: name %q is not UTF-8", name)
	}
	return nil
}

// mainFile picks the program's source: main.<ext>, else the only file with one of
// the language's extensions.
func mainFile(req *api.FnCallRequest) (string, error) {
	lg := langs[req.Language]
	for _, ext := range lg.ext {
		if _, ok := req.Files["main"+ext]; ok {
			return "main" + ext, nil
		}
	}
	var found []string
	for name := range req.Files {
		if slices.Contains(lg.ext, path.Ext(name)) {
			found = append(found, name)
		}
	}
	sort.Strings(found)
	switch {
	case len(found) == 1 || len(found) > 1 && lg.compile != "" && !strings.Contains(lg.compile, "%s"):
		return found[0], nil // a compile of every source (junit) takes any
	case len(found) == 0:
		return "", errdefs.Invalid("files: no %s source (main%s)", req.Language, lg.ext[0])
	default:
		return "", errdefs.Invalid("files: several %s sources (%s); name the program main%s", req.Language, strings.Join(found, ", "), lg.ext[0])
	}
}

// effectiveLimits fills in defaults.
func effectiveLimits(l api.FnCallLimits) Limits {
	if l.CPUTimeMs == 0 {
		l.CPUTimeMs = DefaultCPUTimeMs
	}
	if l.WallTimeMs == 0 {
		l.WallTimeMs = min(2*l.CPUTimeMs+1000, MaxWallTimeMs)
	}
	if l.MemoryBytes == 0 {
		l.MemoryBytes = DefaultMemoryBytes
	}
	if l.Processes == 0 {
		l.Processes = DefaultProcesses
	}
	if l.OutputBytes == 0 {
		l.OutputBytes = DefaultOutputBytes
	}
	if l.FileSizeBytes == 0 {
		l.FileSizeBytes = DefaultFileSize
	}
	return Limits{
		CPU: time.Duration(l.CPUTimeMs) * time.Millisecond, Wall: time.Duration(l.WallTimeMs) * time.Millisecond,
		Memory: l.MemoryBytes, Procs: l.Processes, Output: l.OutputBytes, Stderr: l.OutputBytes,
		FileSize: l.FileSizeBytes, Tmpfs: l.MemoryBytes, Stack: l.StackBytes,
	}
}

// Call runs one FnCall: compile (cached) if the language has a compile step, then
// every test in its own sandbox, in parallel. Invalid requests are
// invalid_argument errors; infrastructure failures are system_error verdicts, or
// an error when nothing could run at all.
func (e *Engine) Call(ctx context.Context, req api.FnCallRequest) (api.FnCallResult, error) {
	if err := Validate(&req); err != nil {
		return api.FnCallResult{}, err
	}
	if _, err := e.pool(req.Image); err != nil {
		return api.FnCallResult{}, err
	}
	res := api.FnCallResult{Tests: []api.FnCallTestResult{}}
	env := []string{baseEnv, "HOME=/w", "LANG=C.UTF-8", "TMPDIR=/w/tmp"}
	keys := make([]string, 0, len(req.Env))
	for k := range req.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+req.Env[k])
	}

	var args []string
	var files []File
	if len(req.Cmd) > 0 {
		args = req.Cmd
	} else {
		lg := langs[req.Language]
		main, _ := mainFile(&req)
		if lg.compile == "" {
			args = lg.run("/w/" + main)
		} else {
			c, bin, err := e.compile(ctx, &req, lg, main)
			if err != nil {
				return res, err
			}
			res.Compile = c
			if c.Verdict != api.VerdictAccepted {
				res.Verdict = c.Verdict
				return res, nil
			}
			f, release, err := e.cache.openBin(bin)
			if err != nil {
				return res, errdefs.Internal(err, "open compiled program")
			}
			defer release()
			files = append(files, File{Name: binPath[len("/w/"):], Mode: 0o755, F: f, Bind: true})
			args = lg.run("/w/" + main)
		}
	}
	// Compiled programs get the binary alone; interpreted ones and raw commands
	// get every file.
	if res.Compile == nil {
		fs, err := memFiles(req.Files)
		if err != nil {
			return res, errdefs.Internal(err, "prepare files")
		}
		defer func() {
			for _, f := range fs {
				f.F.Close()
			}
		}()
		files = append(files, fs...)
	}
	lim := effectiveLimits(req.Limits)
	res.Tests = make([]api.FnCallTestResult, len(req.Tests))
	if len(req.Tests) == 1 { // no goroutine hand-off for the common case
		res.Tests[0] = e.runTest(ctx, req.Image, args, env, files, lim, req.Tests[0])
	}
	var wg sync.WaitGroup
	for i, t := range req.Tests {
		if len(req.Tests) == 1 {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res.Tests[i] = e.runTest(ctx, req.Image, args, env, files, lim, t)
		}()
	}
	wg.Wait()
	res.Verdict = api.VerdictAccepted
	for _, t := range res.Tests {
		if t.Verdict != api.VerdictAccepted {
			res.Verdict = t.Verdict
			break
		}
	}
	return res, nil
}

func memFiles(m map[string]string) ([]File, error) {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []File
	for _, n := range names {
		f, err := memFile("fncall-file", []byte(m[n]))
		if err != nil {
			for _, o := range out {
				o.F.Close()
			}
			return nil, err
		}
		mode := uint32(0o644)
		if strings.HasPrefix(m[n], "#!") {
			mode = 0o755
		}
		out = append(out, File{Name: n, Mode: mode, F: f})
	}
	return out, nil
}

func (e *Engine) runTest(ctx context.Context, image string, args, env []string, files []File, lim Limits, t api.FnCallTest) api.FnCallTestResult {
	sysErr := func(err error) api.FnCallTestResult {
		return api.FnCallTestResult{Verdict: api.VerdictSystemError, ExitCode: -1, Message: err.Error()}
	}
	var stdin *os.File
	if t.Stdin != "" {
		f, err := memFile("fncall-stdin", []byte(t.Stdin))
		if err != nil {
			return sysErr(err)
		}
		defer f.Close()
		stdin = f
	}
	r, err := e.Run(ctx, Spec{Image: image, Args: args, Env: env, Files: files, Stdin: stdin, Limits: lim})
	if err != nil {
		return sysErr(err)
	}
	return judge(r, lim, t)
}

// judge turns a run into a verdict.
func judge(r Result, lim Limits, t api.FnCallTest) api.FnCallTestResult {
	out := api.FnCallTestResult{
		ExitCode: r.ExitCode, CPUTimeMs: ms(r.CPU), WallTimeMs: ms(r.Wall), PeakMemoryBytes: r.MaxRSS,
		Stdout: strings.ToValidUTF8(string(r.Stdout), "\uFFFD"), Stderr: strings.ToValidUTF8(string(r.Stderr), "\uFFFD"),
		StdoutTruncated: r.StdoutOver, StderrTruncated: r.StderrTruncated,
	}
	if r.Signal != 0 {
		out.Signal = unix.SignalName(r.Signal)
	}
	cpuOver := lim.CPU > 0 && r.CPU > lim.CPU
	switch {
	case r.Killed == "canceled":
		out.Verdict, out.Message = api.VerdictSystemError, "the call was canceled"
	case r.Killed == "output" || r.StdoutOver:
		out.Verdict, out.Message = api.VerdictOutputLimit, fmt.Sprintf("stdout exceeded %d bytes", lim.Output)
	case r.OOM || r.MaxRSS > lim.Memory:
		// PeakMemoryBytes stays what was measured (an OOM kill can come
		// before the RSS the kernel reports reaches the limit).
		out.Verdict, out.LimitHit = api.VerdictMemoryLimit, true
		out.Message = fmt.Sprintf("memory limit of %d bytes exceeded", lim.Memory)
	case r.Signal == unix.SIGXCPU || cpuOver:
		out.Verdict, out.TimeLimit = api.VerdictTimeLimit, "cpu"
		out.Message = fmt.Sprintf("CPU time limit of %v exceeded", lim.CPU)
	case r.Killed == "wall":
		out.Verdict, out.TimeLimit = api.VerdictTimeLimit, "wall"
		out.Message = fmt.Sprintf("wall time limit of %v exceeded", lim.Wall)
	case r.Signal == unix.SIGXFSZ:
		out.Verdict, out.Message = api.VerdictOutputLimit, fmt.Sprintf("a file exceeded the file size limit of %d bytes", lim.FileSize)
	case r.ExecErr != "":
		out.Verdict, out.Message = api.VerdictRuntimeError, "could not start the program: "+r.ExecErr
	case r.Signal != 0:
		out.Verdict, out.Message = api.VerdictRuntimeError, "killed by "+out.Signal
	case r.ExitCode != 0:
		out.Verdict, out.Message = api.VerdictRuntimeError, fmt.Sprintf("exit code %d", r.ExitCode)
	case t.ExpectedOutput != nil:
		mode, eps := "", 0.0
		if t.Compare != nil {
			mode, eps = t.Compare.Mode, t.Compare.Epsilon
		}
		if ok, msg := Compare(mode, eps, r.Stdout, []byte(*t.ExpectedOutput)); ok {
			out.Verdict = api.VerdictAccepted
		} else {
			out.Verdict, out.Message = api.VerdictWrongAnswer, msg
		}
	default:
		out.Verdict = api.VerdictAccepted
	}
	return out
}

func ms(d time.Duration) float64 { return math.Round(float64(d.Microseconds())) / 1000 }

// compile builds the program in a sandbox, through the cache. It returns the
// compile description and, on success, the binary's host path.
func (e *Engine) compile(ctx context.Context, req *api.FnCallRequest, lg lang, main string) (*api.FnCallCompile, string, error) {
	image := req.Image
	if image == "" {
		image = DefaultImage
	}
	cmd := lg.compileCmd(main)
	key := cacheKey(image, req.Language, cmd, lg.env, req.Files)
	entry, cached, err := e.cache.get(key, func() (cacheEntry, []byte, error) {
		fs, err := memFiles(req.Files)
		if err != nil {
			return cacheEntry{}, nil, errdefs.Internal(err, "prepare files")
		}
		defer func() {
			for _, f := range fs {
				f.F.Close()
			}
		}()
		env := append([]string{baseEnv, "HOME=/w", "LANG=C.UTF-8", "TMPDIR=/w/tmp"}, lg.env...)
		lim := compileLimits
		if t := time.Duration(req.Limits.CompileTimeMs) * time.Millisecond; t > 0 {
			lim.CPU, lim.Wall = min(lim.CPU, t), min(lim.Wall, t)
		}
		r, err := e.Run(ctx, Spec{Image: req.Image, Args: []string{"/bin/sh", "-c", "{ " + cmd + "\n} >&2 && cat /w/.out"},
			Env: env, Files: fs, Limits: lim})
		if err != nil {
			return cacheEntry{}, nil, err
		}
		ce := cacheEntry{ExitCode: r.ExitCode, WallMs: ms(r.Wall), CPUMs: ms(r.CPU),
			Output: strings.ToValidUTF8(string(r.Stderr), "\uFFFD")}
		switch {
		case r.Killed == "wall" || r.Signal == unix.SIGXCPU || r.CPU > lim.CPU:
			// Not cached: the same program may compile under a longer limit.
			return ce, nil, &compileTimeout{entry: ce, limit: lim.Wall}
		case r.Killed != "" && r.Killed != "output":
			return ce, nil, errdefs.Internal(fmt.Errorf("compile killed: %s", r.Killed), "compile")
		case r.Exited && r.ExitCode == 0 && !r.StdoutOver && len(r.Stdout) > 0:
			ce.OK = true
			return ce, r.Stdout, nil
		case r.OOM:
			ce.Message = "the compiler exceeded its memory limit"
		case r.StdoutOver:
			ce.Message = "the program binary is too large"
		case r.Signal != 0:
			ce.Message = "the compiler was killed by " + unix.SignalName(r.Signal)
		default:
			ce.Message = fmt.Sprintf("the compiler exited with code %d", r.ExitCode)
		}
		return ce, nil, nil
	})
	var to *compileTimeout
	if errors.As(err, &to) {
		return &api.FnCallCompile{Verdict: api.VerdictTimeLimit, Output: to.entry.Output, ExitCode: to.entry.ExitCode,
			WallTimeMs: to.entry.WallMs, CPUTimeMs: to.entry.CPUMs, Message: to.Error()}, "", nil
	}
	if err != nil {
		return &api.FnCallCompile{Verdict: api.VerdictSystemError, Message: err.Error()}, "", nil
	}
	c := &api.FnCallCompile{Verdict: api.VerdictAccepted, Cached: cached, Output: entry.Output, ExitCode: entry.ExitCode,
		WallTimeMs: entry.WallMs, CPUTimeMs: entry.CPUMs, Message: entry.Message}
	if !entry.OK {
		c.Verdict = api.VerdictCompileError
	}
	return c, entry.bin, nil
}

// compileTimeout is a compile stopped at its time limit.
type compileTimeout struct {
	entry cacheEntry
	limit time.Duration
}

func (c *compileTimeout) Error() string {
	return fmt.Sprintf("the compile exceeded its time limit of %v", c.limit)
}

func cacheKey(image, language, cmd string, env []string, files map[string]string) string {
	b, _ := json.Marshal(struct {
		V        int               `json:"v"`
		Image    string            `json:"image"`
		Language string            `json:"language"`
		Cmd      string            `json:"cmd"`
		Env      []string          `json:"env"`
		Files    map[string]string `json:"files"` // json sorts map keys
	}{1, image, language, cmd, env, files})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// CompiledBinary returns the host path of the cached binary of a program that
// compiled before (for benchmarks comparing against bare runs).
func (e *Engine) CompiledBinary(language string, files map[string]string, image string) (string, error) {
	lg, ok := langs[language]
	if !ok || lg.compile == "" {
		return "", errdefs.Invalid("language %q has no compile step", language)
	}
	if image == "" {
		image = DefaultImage
	}
	req := api.FnCallRequest{Language: language, Files: files}
	main, err := mainFile(&req)
	if err != nil {
		return "", err
	}
	key := cacheKey(image, language, lg.compileCmd(main), lg.env, files)
	entry, ok := e.cache.load(key)
	if !ok || !entry.OK {
		return "", errdefs.NotFound("no compiled binary for this program")
	}
	return entry.bin, nil
}

package deptest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const mod = "github.com/dsec-dev/dsec/"

// frontEnds are the HTTP front ends: nothing below the session service may import
// them.
var frontEnds = Under(mod + "internal/frontend")

// benchTooling is the benchmark and probe tooling the product never imports
// (`dsecd bench` reaches it from cmd/dsecd's bench files only).
var benchTooling = Under(mod+"internal/bench", mod+"internal/bench/peer", mod+"internal/bench/vmbench",
	mod+"internal/bench/placebench")

// rules: each package pattern (and everything it imports) must not reach a
// package the predicate matches; except lists patterns the rule leaves out.
var rules = []struct {
	patterns []string
	except   []string
	forbid   func(string) bool
	why      string
}{
	{
		patterns: []string{
			"./internal/session/...", "./internal/trajectory/...", "./internal/agent/...",
			"./internal/backend/driver/...", "./internal/backend/container/...", "./internal/backend/fncall/...",
		},
		forbid: frontEnds,
		why:    "the session service, the trajectory log, the node agent and the drivers sit below every front end",
	},
	{
		patterns: []string{"./internal/backend/driver/...", "./internal/backend/container/...", "./internal/backend/fncall/..."},
		forbid:   Under(mod+"internal/agent", mod+"internal/app"),
		why:      "drivers sit below the node agent",
	},
	{
		patterns: []string{"./internal/session/..."},
		forbid:   Under(mod+"internal/agent", mod+"internal/app", mod+"internal/backend/driver", mod+"internal/backend/container"),
		why:      "the session service is an interface: it names no implementation",
	},
	{
		patterns: []string{"./internal/frontend/..."},
		forbid: Under(mod+"internal/app", mod+"internal/backend/container", mod+"internal/backend/vm",
			mod+"internal/backend/fncall", mod+"internal/backend/driver"),
		why: "front ends map the session contract: they know no role's assembly and no driver",
	},
	{
		patterns: []string{"./internal/backend/container/...", "./internal/backend/vm/...", "./internal/backend/fncall/..."},
		forbid:   frontEnds,
		why:      "drivers (VMs included) sit below every front end",
	},
	{
		patterns: []string{"./internal/metrics/..."},
		forbid: Under(mod+"internal/agent", mod+"internal/backend/fncall", mod+"internal/image/lazy", mod+"internal/backend/container",
			mod+"internal/backend/vm", mod+"internal/backend/driver", mod+"internal/trajectory", mod+"internal/cluster",
			mod+"internal/cluster/noderpc", mod+"internal/frontend", mod+"internal/app"),
		why: "metrics imports no domain package: it defines the small interfaces and stat structs it reads, and the role's assembly (internal/app) adapts the domain packages to them",
	},
	{
		patterns: []string{"./internal/cluster/noderpc/...", "./internal/frontend/..."},
		forbid:   Under(mod+"internal/metrics", mod+"internal/trajectory"),
		why:      "transports know no decorator: the metrics and trajectory interceptors are composed by the role's assembly (session.Chain)",
	},
	{
		patterns: []string{"./internal/...", "./pkg/...", "./ui/..."},
		except: []string{"./internal/bench/...", "./internal/bench/peer/...", "./internal/bench/vmbench/...",
			"./internal/bench/placebench/...", "./internal/escapeprobe/...", "./internal/testprog/..."},
		forbid: benchTooling,
		why:    "the product never imports benchmark tooling (cmd/dsecd: TestOnlyBenchFilesImportBenchTooling)",
	},
}

func TestDependencyDirection(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, r := range rules {
		g, err := Load("../..", r.patterns...)
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for pkg := range g {
			if !matchesAny(pkg, r.patterns) || matchesAny(pkg, r.except) {
				continue
			}
			checked++
			if chain := g.Path(pkg, r.forbid); chain != nil {
				t.Errorf("%s must not import %s (%s); import chain:\n\t%s",
					pkg, chain[len(chain)-1], r.why, strings.Join(chain, "\n\t→ "))
			}
		}
		if checked == 0 {
			t.Errorf("rule %v matched no package", r.patterns)
		}
	}
}

// matchesAny says whether pkg is one of the "./dir/..." patterns.
func matchesAny(pkg string, patterns []string) bool {
	for _, p := range patterns {
		if Under(mod + strings.TrimSuffix(strings.TrimPrefix(p, "./"), "/..."))(pkg) {
			return true
		}
	}
	return false
}

// TestOnlyBenchFilesImportBenchTooling: cmd/dsecd is the product's daemon
// binary and `dsecd bench` is one of its commands, so the package rule cannot
// hold there; per file, only the bench command's files (bench*.go, *_bench.go)
// import the benchmark tooling. The same holds for cmd/dsec (which links no
// tooling at all: TestClientLinksNoServerCode).
func TestOnlyBenchFilesImportBenchTooling(t *testing.T) {
	var files []string
	for _, dir := range []string{"../../cmd/dsec", "../../cmd/dsecd"} {
		fs, err := filepath.Glob(dir + "/*.go")
		if err != nil || len(fs) == 0 {
			t.Fatalf("%s sources: %v %v", dir, fs, err)
		}
		files = append(files, fs...)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(f), ".go"), "_test")
		if strings.HasPrefix(name, "bench") || strings.HasSuffix(name, "_bench") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range af.Imports {
			if path, _ := strconv.Unquote(im.Path.Value); benchTooling(path) {
				t.Errorf("%s imports %s: only the bench command's files (bench*.go, *_bench.go) may", f, path)
			}
		}
	}
}

func TestPath(t *testing.T) {
	g := Graph{"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": {"x/y"}, "x/y": nil}
	got := g.Path("a", Under("x"))
	if strings.Join(got, " ") != "a b d x/y" {
		t.Fatalf("path %v", got)
	}
	if g.Path("d", Under("a")) != nil {
		t.Fatal("found a path that does not exist")
	}
	if g.Path("x/y", Under("x")) != nil {
		t.Fatal("a package matched itself")
	}
}

// TestFrontEndsCallTheContract: no front end probes the session service with a
// type assertion; the contract has every method and answers not_implemented
// for what an implementation lacks.
func TestFrontEndsCallTheContract(t *testing.T) {
	found, err := SessionAssertions("../frontend")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range found {
		t.Errorf("%s: %s probes the session service; call the contract and map not_implemented", a.Pos, a.Expr)
	}
}

// TestSessionAssertionsFinds: the check finds each form of probe.
func TestSessionAssertionsFinds(t *testing.T) {
	dir := t.TempDir()
	src := `package p

import "example.com/session"

type admin interface{ Nodes() }

func f(svc any, s struct{ svc any }, w any) {
	_, _ = svc.(session.Forker)
	_, _ = s.svc.(admin)
	_, _ = w.(interface{ Flush() })
	switch svc.(type) {
	}
	_, _ = w.(error)
}
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	found, err := SessionAssertions(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range found {
		got = append(got, a.Expr)
	}
	want := "svc.(session.Forker) s.svc.(admin) w.(interface{...}) svc.(type)"
	if strings.Join(got, " ") != want {
		t.Errorf("found %q, want %q", strings.Join(got, " "), want)
	}
}

// fakeMethods is how many methods of its own make a type embedding
// session.Unimplemented a hand-written fake of the session service (a test's
// one- or two-method stub for an error or a route is not).
const fakeMethods = 10

// knownFakes are hand-written fakes of the session service allowed to remain,
// each with why agenttest (the agent over the mock driver) cannot replace it.
// It is empty: every test serves agenttest.
var knownFakes = map[string]string{}

// TestOneSessionFake: no test code outside agenttest answers the session
// contract itself: tests serve the agent over the mock driver.
func TestOneSessionFake(t *testing.T) {
	found, err := SessionFakes(fakeMethods, "../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range found {
		typ := strings.TrimPrefix(f.Type, "../../")
		seen[typ] = true
		if _, ok := knownFakes[typ]; !ok {
			t.Errorf("%s: %s declares %d methods over session.Unimplemented: a hand-written fake of the session service; use agenttest (the agent over the mock driver)", f.Pos, typ, f.Methods)
		}
	}
	for typ := range knownFakes {
		if !seen[typ] {
			t.Errorf("%s is gone: remove it from knownFakes", typ)
		}
	}
}

// TestSessionFakesFinds: the check finds a fake and leaves a one-method stub.
func TestSessionFakesFinds(t *testing.T) {
	dir := t.TempDir()
	src := `package p

import "example.com/session"

type fake struct{ session.Unimplemented }

func (fake) A() {}
func (*fake) B() {}

type stub struct {
	session.Unimplemented
	n int
}

func (stub) A() {}
`
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "q.go"), []byte("package p\n\nfunc (stub) B() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	found, err := SessionFakes(2, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || !strings.HasSuffix(found[0].Type, ".fake") || found[0].Methods != 2 {
		t.Fatalf("found %+v, want the fake with 2 methods (not the stub: its second method is not test code)", found)
	}
}

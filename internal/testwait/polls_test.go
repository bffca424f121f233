package testwait

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// allowFile lists the hand-written polls that stay, one "path:Func reason" a
// line (path from the module root; Func the enclosing function, Type.Method
// for a method).
const allowFile = "polls.allow"

// TestNoHandWrittenPolls: no test of the module waits with a loop of its own
// that sleeps and compares the time with a deadline (use For or Until), but
// the ones polls.allow lists with a reason; and every listed one still exists.
func TestNoHandWrittenPolls(t *testing.T) {
	root := moduleRoot(t)
	allowed := readAllow(t)
	found, err := scanPolls(root)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range found {
		seen[f.key()] = true
		if !allowed[f.key()] {
			t.Errorf("%s:%d: a hand-written deadline poll in %s: wait with testwait.For or testwait.Until (or list %q in internal/testwait/%s with the reason)",
				f.path, f.line, f.fn, f.key(), allowFile)
		}
	}
	for k := range allowed {
		if !seen[k] {
			t.Errorf("%s lists %s, which has no hand-written poll any more: remove the line", allowFile, k)
		}
	}
}

// TestScanFindsPlantedPoll: the scan finds a planted deadline loop (each
// form) and not a wait through For or a loop that only sleeps.
func TestScanFindsPlantedPoll(t *testing.T) {
	dir := t.TempDir()
	src := `package x

import (
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/testwait"
)

func TestPlanted(t *testing.T) {
	deadline := time.Now().Add(time.Second)
	for !ready() {
		if time.Now().After(deadline) {
			t.Fatal("never")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *helper) waitBefore() {
	deadline := time.Now().Add(time.Second)
	for !ready() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

func sinceLoop() {
	start := time.Now()
	for time.Since(start) < time.Second {
		time.Sleep(time.Millisecond)
	}
}

func fine(t *testing.T) {
	testwait.For(t, time.Second, "ready", ready)
	for range 3 {
		time.Sleep(time.Millisecond) // a pace, not a wait on a deadline
	}
}
`
	if err := os.WriteFile(filepath.Join(dir, "x_test.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	found, err := scanPolls(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range found {
		got = append(got, f.key())
	}
	want := []string{"x_test.go:TestPlanted", "x_test.go:helper.waitBefore", "x_test.go:sinceLoop"}
	if !slices.Equal(got, want) {
		t.Errorf("found %q, want %q", got, want)
	}
}

type poll struct {
	path string // from the scanned root, slash-separated
	line int
	fn   string
}

func (p poll) key() string { return p.path + ":" + p.fn }

// scanPolls finds, in every *_test.go file under root, the for loops that both
// call time.Sleep and compare the time (time.Now().After/Before, time.Since,
// time.Until): a wait on a deadline written by hand.
func scanPolls(root string) ([]poll, error) {
	var out []poll
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if fs, ok := n.(*ast.ForStmt); ok && isPoll(fs) {
					out = append(out, poll{path: filepath.ToSlash(rel), line: fset.Position(fs.Pos()).Line, fn: funcName(fd)})
				}
				return true
			})
		}
		return nil
	})
	return out, err
}

// isPoll: the loop itself (not a loop or function literal inside it) sleeps
// and reads the clock against a deadline.
func isPoll(fs *ast.ForStmt) bool {
	sleeps, clock := false, false
	var visit func(n ast.Node) bool
	visit = func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ForStmt, *ast.RangeStmt, *ast.FuncLit:
			return false
		case *ast.CallExpr:
			switch {
			case isTimeCall(n.Fun, "Sleep"):
				sleeps = true
			case isTimeCall(n.Fun, "Since"), isTimeCall(n.Fun, "Until"):
				clock = true
			default:
				// time.Now().After(x) / Before(x)
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "After" || sel.Sel.Name == "Before") {
					if c, ok := sel.X.(*ast.CallExpr); ok && isTimeCall(c.Fun, "Now") {
						clock = true
					}
				}
			}
		}
		return true
	}
	for _, part := range []ast.Node{fs.Cond, fs.Post, fs.Body} {
		if part != nil {
			ast.Inspect(part, visit)
		}
	}
	return sleeps && clock
}

func isTimeCall(fun ast.Expr, name string) bool {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == "time"
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if ix, ok := typ.(*ast.IndexExpr); ok {
		typ = ix.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

func readAllow(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open(allowFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	allowed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, reason, _ := strings.Cut(line, " ")
		if strings.TrimSpace(reason) == "" {
			t.Errorf("%s:%d: %s has no reason", allowFile, n, key)
		}
		allowed[key] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return allowed
}

// moduleRoot is the directory of the go.mod above the test's directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal(fmt.Errorf("no go.mod above %s", dir))
		}
		dir = parent
	}
}

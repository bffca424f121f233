package deptest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
)

// Assertion is a type assertion (or a type switch) that probes the session
// service for an optional part, found by SessionAssertions.
type Assertion struct {
	Pos  string // file:line
	Expr string // the asserted expression and type, as written
}

// SessionAssertions parses the non-test Go files under dirs and returns every
// type assertion or type switch that probes a session service: one whose type
// is from internal/session (session.X), or an interface literal with methods
// (an ad-hoc optional interface), or whose operand names the service (an
// expression mentioning "svc" or "Service", the names every front end gives
// it). The session contract has no optional parts: a front end calls it and
// maps not_implemented. It is a source check, not a type check.
func SessionAssertions(dirs ...string) ([]Assertion, error) {
	var out []Assertion
	fset := token.NewFileSet()
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				// x.(T), and x.(type) of a type switch (Type nil).
				ta, ok := n.(*ast.TypeAssertExpr)
				if !ok {
					return true
				}
				x, typ := ta.X, ta.Type
				if probesService(x, typ) {
					out = append(out, Assertion{Pos: fmt.Sprintf("%s:%d", path, fset.Position(n.Pos()).Line),
						Expr: fmt.Sprintf("%s.(%s)", text(x), text(typ))})
				}
				return true
			})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// probesService says whether asserting x to typ probes a session service.
func probesService(x, typ ast.Expr) bool {
	if sel, ok := typ.(*ast.SelectorExpr); ok {
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == "session" {
			return true
		}
	}
	if it, ok := typ.(*ast.InterfaceType); ok && it.Methods != nil && len(it.Methods.List) > 0 {
		return true
	}
	src := text(x)
	return strings.Contains(src, "svc") || strings.Contains(src, "Service")
}

// text is e as source, roughly (identifiers, selectors, calls and stars).
func text(e ast.Expr) string {
	switch e := e.(type) {
	case nil:
		return "type"
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return text(e.X) + "." + e.Sel.Name
	case *ast.StarExpr:
		return "*" + text(e.X)
	case *ast.CallExpr:
		return text(e.Fun) + "(...)"
	case *ast.IndexExpr:
		return text(e.X) + "[...]"
	case *ast.InterfaceType:
		return "interface{...}"
	case *ast.ParenExpr:
		return "(" + text(e.X) + ")"
	default:
		return fmt.Sprintf("%T", e)
	}
}

package deptest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
)

// Fake is a type in test code that answers the session contract itself: it
// embeds session.Unimplemented (so it is a whole session.Service) and declares
// methods of its own, found by SessionFakes.
type Fake struct {
	Pos     string // file:line of the type
	Type    string // package directory and name, "internal/x/y.fakeService"
	Methods int    // the methods declared on it
}

// SessionFakes parses the test code under dirs (_test.go files, and every file
// of a directory whose name ends in "test", the test helper packages) and
// returns each type that embeds session.Unimplemented and declares at least
// min methods. It is a source check, not a type check: a test that needs a
// node uses agenttest (the agent over the mock driver); a type overriding a
// method or two of a real service is not a fake of it.
func SessionFakes(min int, dirs ...string) ([]Fake, error) {
	fset := token.NewFileSet()
	type key struct{ dir, name string }
	embeds := map[key]string{} // → position
	methods := map[key]int{}
	for _, root := range dirs {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			dir := filepath.Dir(path)
			if !strings.HasSuffix(path, "_test.go") && !strings.HasSuffix(filepath.Base(dir), "test") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			for _, decl := range f.Decls {
				switch decl := decl.(type) {
				case *ast.GenDecl:
					for _, spec := range decl.Specs {
						ts, ok := spec.(*ast.TypeSpec)
						if !ok {
							continue
						}
						if st, ok := ts.Type.(*ast.StructType); ok && embedsUnimplemented(st) {
							embeds[key{dir, ts.Name.Name}] = fset.Position(ts.Pos()).String()
						}
					}
				case *ast.FuncDecl:
					if decl.Recv == nil || len(decl.Recv.List) != 1 {
						continue
					}
					typ := decl.Recv.List[0].Type
					if star, ok := typ.(*ast.StarExpr); ok {
						typ = star.X
					}
					if id, ok := typ.(*ast.Ident); ok {
						methods[key{dir, id.Name}]++
					}
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	var out []Fake
	for k, pos := range embeds {
		if n := methods[k]; n >= min {
			out = append(out, Fake{Pos: pos, Type: filepath.ToSlash(k.dir) + "." + k.name, Methods: n})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out, nil
}

// embedsUnimplemented says whether st has an embedded session.Unimplemented.
func embedsUnimplemented(st *ast.StructType) bool {
	for _, f := range st.Fields.List {
		if len(f.Names) != 0 {
			continue
		}
		if sel, ok := f.Type.(*ast.SelectorExpr); ok && text(sel) == "session.Unimplemented" {
			return true
		}
	}
	return false
}

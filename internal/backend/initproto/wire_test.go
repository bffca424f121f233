package initproto

import (
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// wireLayout is what csrc/common/wire.h asserts at compile time: struct
// sizes, field offsets and constants (its WIRE_SIZE, WIRE_OFFSET and
// WIRE_CONST lines).
type wireLayout struct {
	size   map[string]int64 // "spawn_req" -> 4104
	offset map[string]int64 // "spawn_req.path" -> 8
	consts map[string]int64 // "FRAME_MAGIC" -> 0xD5EC
}

var (
	wireSizeRe   = regexp.MustCompile(`(?m)^WIRE_SIZE\(struct (\w+), (\w+)\);`)
	wireOffsetRe = regexp.MustCompile(`(?m)^WIRE_OFFSET\(struct (\w+), (\w+), (\w+)\);`)
	wireConstRe  = regexp.MustCompile(`(?m)^WIRE_CONST\((\w+), (\w+)\);`)
)

func readWireLayout(t *testing.T) wireLayout {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "csrc", "common", "wire.h"))
	if err != nil {
		t.Fatal(err)
	}
	num := func(s string) int64 {
		v, err := strconv.ParseInt(s, 0, 64)
		if err != nil {
			t.Fatalf("wire.h: number %q: %v", s, err)
		}
		return v
	}
	w := wireLayout{size: map[string]int64{}, offset: map[string]int64{}, consts: map[string]int64{}}
	for _, m := range wireSizeRe.FindAllStringSubmatch(string(b), -1) {
		w.size[m[1]] = num(m[2])
	}
	for _, m := range wireOffsetRe.FindAllStringSubmatch(string(b), -1) {
		w.offset[m[1]+"."+m[2]] = num(m[3])
	}
	for _, m := range wireConstRe.FindAllStringSubmatch(string(b), -1) {
		w.consts[m[1]] = num(m[2])
	}
	if len(w.size) == 0 || len(w.offset) == 0 || len(w.consts) == 0 {
		t.Fatalf("wire.h: found %d sizes, %d offsets, %d constants; the WIRE_ lines changed form",
			len(w.size), len(w.offset), len(w.consts))
	}
	return w
}

// goConsts evaluates the package-level constants declared in one Go source
// file (relative to the repository root), without building its package.
func goConsts(t *testing.T, file string) map[string]int64 {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join("..", "..", "..", file), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Keep the const declarations only: the rest of the file needs its
	// imports, the constants do not.
	var decls []ast.Decl
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			decls = append(decls, g)
		}
	}
	f.Decls, f.Imports = decls, nil
	conf := types.Config{Importer: importer.Default(), Error: func(error) {}}
	pkg, _ := conf.Check(f.Name.Name, fset, []*ast.File{f}, nil)
	out := map[string]int64{}
	for _, name := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if !ok {
			continue
		}
		if v, exact := constant.Int64Val(constant.ToInt(c.Val())); exact {
			out[name] = v
		}
	}
	return out
}

// goOffsets reads, in function fn of a Go source file, where fixed-layout
// bytes are written and read: for binary.LittleEndian.PutUintN(b[OFF:], X)
// and b[OFF] = X it records ExprString(X) -> OFF, for copy(b[OFF:], X) too,
// for a loop's PutUintN(b[OFF+N*i:], v) "loop v" -> OFF, for name := (an
// expression reading b[OFF:] or b[OFF]) "name =" -> OFF, and for a keyed
// composite literal field key: (an expression reading b[OFF:]) "key:" -> OFF.
func goOffsets(t *testing.T, file, fn string) map[string]int64 {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join("..", "..", "..", file), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	lit := func(e ast.Expr) (int64, bool) {
		b, ok := e.(*ast.BasicLit)
		if !ok || b.Kind != token.INT {
			return 0, false
		}
		v, err := strconv.ParseInt(b.Value, 0, 64)
		return v, err == nil
	}
	// at finds the constant offset that e reads or writes: b[OFF:] or b[OFF].
	at := func(e ast.Expr) (int64, bool) {
		switch x := e.(type) {
		case *ast.SliceExpr:
			if x.Low != nil && x.High == nil {
				if v, ok := lit(x.Low); ok {
					return v, true
				}
				if b, ok := x.Low.(*ast.BinaryExpr); ok && b.Op == token.ADD {
					return lit(b.X) // OFF+N*i
				}
			}
		case *ast.IndexExpr:
			return lit(x.Index)
		}
		return 0, false
	}
	// reads finds the offset read anywhere inside e.
	reads := func(e ast.Expr) (int64, bool) {
		var off int64
		found := false
		ast.Inspect(e, func(n ast.Node) bool {
			if x, ok := n.(ast.Expr); ok && !found {
				off, found = at(x)
			}
			return !found
		})
		return off, found
	}
	out := map[string]int64{}
	var body *ast.BlockStmt
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == fn {
			body = fd.Body
		}
	}
	if body == nil {
		t.Fatalf("%s: no func %s", file, fn)
	}
	ast.Inspect(body, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.CallExpr:
			name := ""
			switch fun := x.Fun.(type) {
			case *ast.SelectorExpr:
				name = fun.Sel.Name
			case *ast.Ident:
				name = fun.Name
			}
			if (strings.HasPrefix(name, "PutUint") || name == "copy") && len(x.Args) == 2 {
				if off, ok := at(x.Args[0]); ok {
					key := types.ExprString(x.Args[1])
					if s, ok := x.Args[0].(*ast.SliceExpr); ok {
						if _, isSum := s.Low.(*ast.BinaryExpr); isSum {
							key = "loop " + key
						}
					}
					out[key] = off
				}
			}
		case *ast.AssignStmt:
			for i, l := range x.Lhs {
				if i >= len(x.Rhs) {
					break
				}
				if off, ok := at(l); ok { // b[OFF] = X
					out[types.ExprString(x.Rhs[i])] = off
				} else if id, ok := l.(*ast.Ident); ok {
					if off, ok := reads(x.Rhs[i]); ok {
						out[id.Name+" ="] = off
					}
				}
			}
		case *ast.KeyValueExpr:
			if id, ok := x.Key.(*ast.Ident); ok {
				if off, ok := reads(x.Value); ok {
					out[id.Name+":"] = off
				}
			}
		}
		return true
	})
	return out
}

// TestWireLayout checks that the C side's fixed-layout messages
// (csrc/common/wire.h, asserted there by _Static_assert) and the Go
// encoders agree on every size and constant both sides spell out.
func TestWireLayout(t *testing.T) {
	w := readWireLayout(t)
	fncall := goConsts(t, "internal/backend/fncall/zygote.go")
	guest := goConsts(t, "internal/backend/vm/guest/client.go")
	self := goConsts(t, "internal/backend/initproto/spawner.go")

	checks := []struct {
		what   string
		c, goV int64
	}{
		// the init's spawner: 8 bytes of flags and mask, then the path
		{"sizeof(struct spawn_req) vs 8+spawnPathMax", w.size["spawn_req"], 8 + self["spawnPathMax"]},
		{"offsetof(struct spawn_req, path) vs 8", w.offset["spawn_req.path"], 8},
		{"SPAWN_PATH_MAX vs spawnPathMax", w.consts["SPAWN_PATH_MAX"], spawnPathMax},
		{"SPAWN_CGROUP_BIT vs spawnCgroupBit", w.consts["SPAWN_CGROUP_BIT"], spawnCgroupBit},
		{"sizeof(struct spawn_ans) vs the 8-byte answer", w.size["spawn_ans"], 8},
		// the FnCall zygote
		{"sizeof(struct req) vs fncall.reqHeaderSize", w.size["req"], fncall["reqHeaderSize"]},
		{"sizeof(struct ev) vs fncall.evSize", w.size["ev"], fncall["evSize"]},
		{"FNCALL_MAX_FILES vs fncall.maxFiles", w.consts["FNCALL_MAX_FILES"], fncall["maxFiles"]},
		{"FNCALL_MAX_MSG vs fncall.maxMsg", w.consts["FNCALL_MAX_MSG"], fncall["maxMsg"]},
		// the microVM agent's frames
		{"sizeof(struct frame_hdr) vs guest.hdrLen", w.size["frame_hdr"], guest["hdrLen"]},
		{"FRAME_MAGIC vs guest.magic", w.consts["FRAME_MAGIC"], guest["magic"]},
		{"FRAME_MAX vs guest.maxFrame", w.consts["FRAME_MAX"], guest["maxFrame"]},
		{"FRAME_CHUNK vs guest.chunk", w.consts["FRAME_CHUNK"], guest["chunk"]},
	}
	for _, c := range checks {
		if c.c == 0 || c.goV == 0 {
			t.Errorf("%s: a side is missing (C %d, Go %d)", c.what, c.c, c.goV)
			continue
		}
		if c.c != c.goV {
			t.Errorf("%s: C %d, Go %d", c.what, c.c, c.goV)
		}
	}

	// Where the Go encoders and decoders put each field, read from their
	// code: C field -> the Go expression written (or the name assigned)
	// at that offset.
	sides := []struct {
		file, fn string
		fields   map[string]string
	}{
		{"internal/backend/fncall/zygote.go", "encode", map[string]string{
			"req.op": "r.op", "req.slot": "r.slot", "req.id": "r.id", "req.uid": "r.uid", "req.gid": "r.gid",
			"req.flags": "r.flags", "req.nfiles": "uint32(len(r.files))", "req.rl_cpu": "loop v",
			"req.argc": "uint32(len(r.argv))", "req.envc": "uint32(len(r.env))", "req.strbytes": "uint32(len(s))",
		}},
		{"internal/backend/fncall/zygote.go", "parseEvent", map[string]string{
			"ev.kind": "kind:", "ev.err": "err:", "ev.id": "id:", "ev.pid": "pid:", "ev.status": "status:",
			"ev.utime_us": "utimeUs:", "ev.stime_us": "stimeUs:", "ev.maxrss_kb": "maxRSSKB:", "ev.msg": "m =",
		}},
		{"internal/backend/initproto/spawner.go", "spawn", map[string]string{
			"spawn_req.flags": "flags", "spawn_req.mask": "mask", "spawn_req.path": "path",
			"spawn_ans.pid": "pid =", "spawn_ans.err": "e =",
		}},
		{"internal/backend/vm/guest/client.go", "appendFrame", map[string]string{
			"frame_hdr.type": "byte(typ)", "frame_hdr.stream": "byte(stream)", "frame_hdr.channel": "ch",
			"frame_hdr.len": "uint32(len(body))",
		}},
		{"internal/backend/vm/guest/client.go", "readFrame", map[string]string{
			"frame_hdr.type": "typ =", "frame_hdr.stream": "stream =", "frame_hdr.channel": "ch =",
			"frame_hdr.len": "n =",
		}},
	}
	for _, sd := range sides {
		at := goOffsets(t, sd.file, sd.fn)
		for cf, g := range sd.fields {
			c, ok := w.offset[cf]
			if !ok {
				t.Errorf("wire.h asserts no offset of %s", cf)
				continue
			}
			o, ok := at[g]
			if !ok {
				t.Errorf("%s %s: no %q at a constant offset (found %v)", sd.file, sd.fn, g, at)
				continue
			}
			if o != c {
				t.Errorf("offset of %s: C %d, %s %s %d", cf, c, sd.file, sd.fn, o)
			}
		}
	}
	if w.size["sock_filter"] != 8 {
		t.Errorf("sizeof(struct sock_filter) = %d, the seccomp programs are 8-byte instructions", w.size["sock_filter"])
	}
}

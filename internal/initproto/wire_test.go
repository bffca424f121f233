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
	b, err := os.ReadFile(filepath.Join("..", "..", "csrc", "common", "wire.h"))
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
	f, err := parser.ParseFile(fset, filepath.Join("..", "..", file), nil, 0)
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

// TestWireLayout checks that the C side's fixed-layout messages
// (csrc/common/wire.h, asserted there by _Static_assert) and the Go
// encoders agree on every size and constant both sides spell out.
func TestWireLayout(t *testing.T) {
	w := readWireLayout(t)
	fncall := goConsts(t, "internal/fncall/zygote.go")
	guest := goConsts(t, "internal/vm/guest/client.go")
	self := goConsts(t, "internal/initproto/spawner.go")

	checks := []struct {
		what   string
		c, goV int64
	}{
		// the init's spawner: 8 bytes of flags and mask, then the path
		{"sizeof(struct spawn_req) vs 8+spawnPathMax", w.size["spawn_req"], 8 + self["spawnPathMax"]},
		{"offsetof(struct spawn_req, path) vs 8", w.offset["spawn_req.path"], 8},
		{"SPAWN_PATH_MAX vs spawnPathMax", w.consts["SPAWN_PATH_MAX"], spawnPathMax},
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

	// The Go encoders write the fields at these offsets
	// (internal/fncall/zygote.go's runReq.encode and parseEvent,
	// internal/vm/guest's frame header).
	goOffsets := map[string]int64{
		"req.op": 0, "req.slot": 4, "req.id": 8, "req.uid": 16, "req.gid": 20, "req.flags": 24,
		"req.nfiles": 28, "req.rl_cpu": 32, "req.tmpfs_size": 72, "req.argc": 80, "req.envc": 84,
		"req.strbytes": 88,

		"ev.kind": 0, "ev.err": 4, "ev.id": 8, "ev.pid": 16, "ev.status": 20, "ev.utime_us": 24,
		"ev.stime_us": 32, "ev.maxrss_kb": 40, "ev.msg": 48,

		"spawn_req.flags": 0, "spawn_req.mask": 4, "spawn_ans.pid": 0, "spawn_ans.err": 4,

		"frame_hdr.type": 2, "frame_hdr.stream": 3, "frame_hdr.channel": 4, "frame_hdr.len": 8,
	}
	for k, want := range goOffsets {
		got, ok := w.offset[k]
		if !ok {
			t.Errorf("wire.h asserts no offset of %s", k)
			continue
		}
		if got != want {
			t.Errorf("offset of %s: C %d, Go %d", k, got, want)
		}
	}
	if w.size["sock_filter"] != 8 {
		t.Errorf("sizeof(struct sock_filter) = %d, the seccomp programs are 8-byte instructions", w.size["sock_filter"])
	}
}

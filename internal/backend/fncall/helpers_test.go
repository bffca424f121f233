package fncall

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/pkg/api"
)

var (
	engineOnce sync.Once
	sharedEng  *Engine
	engineErr  error
	engineDir  string
)

func imagesDir() string {
	if d := os.Getenv("DSEC_IMAGES_DIR"); d != "" {
		return d
	}
	return "/var/lib/dsec/images"
}

// testEngine returns the engine shared by this package's tests (closed in
// TestMain). It skips without root or without the judge image.
func testEngine(t testing.TB) *Engine {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat(filepath.Join(imagesDir(), DefaultImage, "image.json")); err != nil {
		t.Skip("no judge image (run `make setup`)")
	}
	engineOnce.Do(func() {
		engineDir, engineErr = os.MkdirTemp("", "fncall-test-")
		if engineErr != nil {
			return
		}
		sharedEng, engineErr = New(Config{Images: &image.Store{Dir: imagesDir()}, StateDir: engineDir})
	})
	if engineErr != nil {
		t.Fatal(engineErr)
	}
	return sharedEng
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedEng != nil {
		if err := sharedEng.Close(); err != nil {
			println("closing engine:", err.Error())
			code = 1
		}
	}
	if engineDir != "" {
		os.RemoveAll(engineDir)
	}
	os.Exit(code)
}

// corpusCase is one testdata/corpus/*.case file: "key: value" header lines, then
// files in txtar style ("-- name --"). The files "stdin" and "expect" are the
// test's input and expected output; the rest are the program's files.
type corpusCase struct {
	name    string
	req     api.FnCallRequest
	verdict string
	hdr     map[string]string
}

func parseCase(name string, b []byte) (corpusCase, error) {
	c := corpusCase{name: name, hdr: map[string]string{}, req: api.FnCallRequest{Files: map[string]string{}}}
	lines := strings.SplitAfter(string(b), "\n")
	var cur string
	files := map[string]*strings.Builder{}
	var order []string
	for _, l := range lines {
		t := strings.TrimRight(l, "\n")
		if strings.HasPrefix(t, "-- ") && strings.HasSuffix(t, " --") && len(t) > 6 {
			cur = strings.TrimSuffix(strings.TrimPrefix(t, "-- "), " --")
			files[cur] = &strings.Builder{}
			order = append(order, cur)
			continue
		}
		if cur == "" {
			if k, v, ok := strings.Cut(t, ":"); ok {
				c.hdr[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
			continue
		}
		files[cur].WriteString(l)
	}
	test := api.FnCallTest{}
	for _, n := range order {
		body := files[n].String()
		switch n {
		case "stdin":
			test.Stdin = body
		case "expect":
			test.ExpectedOutput = &body
		default:
			c.req.Files[n] = body
		}
	}
	num := func(k string) int64 {
		v, _ := strconv.ParseInt(c.hdr[k], 10, 64)
		return v
	}
	c.req.Language = c.hdr["lang"]
	if cmd := c.hdr["cmd"]; cmd != "" {
		c.req.Cmd = strings.Fields(cmd)
	}
	c.verdict = c.hdr["verdict"]
	c.req.Limits = api.FnCallLimits{CPUTimeMs: num("cpu_ms"), WallTimeMs: num("wall_ms"), MemoryBytes: num("memory"),
		Processes: num("processes"), OutputBytes: num("output"), FileSizeBytes: num("file_size")}
	if m := c.hdr["compare"]; m != "" {
		eps, _ := strconv.ParseFloat(c.hdr["epsilon"], 64)
		test.Compare = &api.FnCallCompare{Mode: m, Epsilon: eps}
	}
	c.req.Tests = []api.FnCallTest{test}
	return c, Validate(&c.req)
}

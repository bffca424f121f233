package sandboxfusion

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// go_test with testify, as SandboxFusion's own go_test cases
// (tests/runners/test_go_test.py) and MultiPL-E's Go tests import it: the
// judge image's Debian package, in GOPATH mode.
func TestRealGoTestTestify(t *testing.T) {
	h := realHandler(t)
	dir := os.Getenv("DSEC_IMAGES_DIR")
	if dir == "" {
		dir = "/var/lib/dsec/images"
	}
	if _, err := os.Stat(filepath.Join(dir, "judge", "rootfs", "usr/share/gocode/src/github.com/stretchr/testify/assert")); err != nil {
		t.Fatalf("the judge image has no testify (%v): it predates golang-github-stretchr-testify-dev in scripts/judge-language-packages.txt; make setup rebuilds it", err)
	}
	const fn = "package main\n\nimport (\n\t\"testing\"\n\n\t\"github.com/stretchr/testify/assert\"\n\t\"github.com/stretchr/testify/require\"\n)\n\n" +
		"func Clamp(v, lo, hi int) int {\n\tif v < lo {\n\t\treturn lo\n\t}\n\tif v > hi {\n\t\treturn HI\n\t}\n\treturn v\n}\n\n" +
		"func TestClamp(t *testing.T) {\n\trequire.Equal(t, 0, Clamp(-5, 0, 10))\n\ta := assert.New(t)\n\ta.Equal(10, Clamp(42, 0, 10))\n\ta.Equal(7, Clamp(7, 0, 10))\n}\n"
	// Each run compiles testify and the standard packages it imports in a
	// fresh sandbox (an empty build cache, as SandboxFusion's go_test):
	// 10-28 s on this machine's 2 cores under the suite's load, so the
	// limit leaves room for that; the test is about testify resolving.
	mem := `,"run_timeout":60,"memory_limit_MB":512`
	runModeCases(t, h, "go_test", []modeCase{
		{name: "pass", code: strings.Replace(fn, "HI", "hi", 1), extra: mem, status: StatusSuccess, runStatus: CmdFinished, stdout: "ok"},
		{name: "assertion fails", code: strings.Replace(fn, "HI", "v", 1), extra: mem, status: StatusFailed, runStatus: CmdFinished,
			stdout: "Not equal", exitNonZero: true},
	})
}

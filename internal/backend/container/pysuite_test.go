package container

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// pySuites are CPython's own tests of the file-system semantics a program
// sees: stat and readdir (inode numbers included: os.walk, shutil.copytree
// and samefile compare them), hard links, xattrs (user.*), fsync, statfs,
// mmap, locking, temp files, globbing.
var pySuites = []string{"test_os", "test_shutil", "test_tempfile", "test_posix", "test_fileio",
	"test_stat", "test_glob", "test_pathlib", "test_filecmp", "test_fcntl", "test_mmap"}

// pyTestsuite returns Debian's libpython3.11-testsuite unpacked (a layer
// dir: usr/lib/python3.11/test/...), cached under the system temp dir; it
// skips when apt cannot fetch it.
func pyTestsuite(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "dsec-python3.11-testsuite")
	layer := filepath.Join(dir, "layer")
	if _, err := os.Stat(filepath.Join(layer, "usr/lib/python3.11/test/test_os.py")); err == nil {
		return layer
	}
	tmp, err := os.MkdirTemp(os.TempDir(), "dsec-pyts-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("apt-get", "download", "libpython3.11-testsuite")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("apt-get download libpython3.11-testsuite: %v\n%s", err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		t.Skipf("no .deb downloaded")
	}
	if out, err := exec.Command("dpkg-deb", "-x", debs[0], filepath.Join(tmp, "layer")).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v\n%s", err, out)
	}
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(tmp, "layer"), layer); err != nil {
		t.Fatal(err)
	}
	return layer
}

// pyResult matches unittest's verbose lines: "test_x (test.test_os.C.test_x) ... ok".
var pyResult = regexp.MustCompile(`^test\w* \(([\w.]+)\)\S* \.\.\. (ok|skipped|FAIL|ERROR|expected failure|unexpected success)`)

// pyOutcomes maps "test.module.Class.test" to its outcome word.
func pyOutcomes(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if g := pyResult.FindStringSubmatch(l); g != nil {
			m[g[1]] = g[2]
		}
	}
	return m
}

// TestPythonFSSuitesMatchHost runs the suites in a sandbox (the test
// package as a layer above the debian image) and on the host (Debian's own
// python3 with the same package), both as root, and compares every test's
// outcome: a failure or error in the sandbox must fail on the host too.
// Expected differences are logged: zip tests skip for want of zip/unzip in
// the image, and the xattr tests of test_shutil skip because CPython's
// can_xattr() also needs trusted.* xattrs, which need CAP_SYS_ADMIN (user.*
// xattrs work; see TestFSSemantics).
func TestPythonFSSuitesMatchHost(t *testing.T) {
	const py = "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import sys; print(sys.version_info[:2])").Output(); err != nil || strings.TrimSpace(string(out)) != "(3, 11)" {
		t.Skipf("host %s is not Python 3.11 (%q, %v)", py, out, err)
	}
	w := newWeakDriver(t)
	layer := pyTestsuite(t)
	w.lower = append([]string{layer}, w.lower...)
	w.disk = 1 << 30

	// the host: the stdlib's own test package (support, regrtest) plus
	// the suites, on PYTHONPATH
	host := t.TempDir()
	if out, err := exec.Command("cp", "-r", "/usr/lib/python3.11/test", host+"/").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if out, err := exec.Command("cp", "-r", filepath.Join(layer, "usr/lib/python3.11/test")+"/.", filepath.Join(host, "test")).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	args := append([]string{"-m", "test", "-v"}, pySuites...)
	hc := exec.Command(py, args...)
	hc.Dir = t.TempDir()
	hc.Env = append(os.Environ(), "PYTHONPATH="+host)
	hostOut, _ := hc.CombinedOutput()

	inst := w.start(t, weakening{})
	sbOut, sbErr, ex := run(t, inst, append([]string{"sh", "-c", `cd /tmp && exec python3 "$@" 2>&1`, "sh"}, args...)...)
	hostRes, sbRes := pyOutcomes(string(hostOut)), pyOutcomes(sbOut)
	count := func(m map[string]string) string {
		c := map[string]int{}
		for _, v := range m {
			c[v]++
		}
		return fmt.Sprint(c)
	}
	t.Logf("host: %d tests %s; sandbox: %d tests %s (exit %d)", len(hostRes), count(hostRes), len(sbRes), count(sbRes), ex.Code)
	if len(sbRes) < 500 || len(hostRes) < 500 {
		t.Fatalf("too few results parsed (host %d, sandbox %d):\n%s\n%s", len(hostRes), len(sbRes), tail(sbOut), sbErr)
	}
	var bad, skipDiff []string
	for name, got := range sbRes {
		want, ok := hostRes[name]
		if (got == "FAIL" || got == "ERROR") && want != got {
			bad = append(bad, fmt.Sprintf("%s: %s in the sandbox, %q on the host", name, got, want))
		} else if ok && got != want {
			skipDiff = append(skipDiff, fmt.Sprintf("%s: %s in the sandbox, %s on the host", name, got, want))
		}
	}
	for name := range hostRes {
		if _, ok := sbRes[name]; !ok {
			skipDiff = append(skipDiff, name+": did not run in the sandbox")
		}
	}
	sort.Strings(bad)
	sort.Strings(skipDiff)
	for _, d := range skipDiff {
		t.Logf("differs: %s", d)
	}
	if len(bad) > 0 {
		t.Fatalf("%d tests fail only in the sandbox:\n%s", len(bad), strings.Join(bad, "\n"))
	}
}

func tail(s string) string {
	if len(s) > 3000 {
		return s[len(s)-3000:]
	}
	return s
}

package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

const sample = `{"Action":"run","Package":"m/a","Test":"TestOK"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"pass","Package":"m/a","Test":"TestOK","Elapsed":0.1}
{"Action":"run","Package":"m/a","Test":"TestV2"}
{"Action":"output","Package":"m/a","Test":"TestV2","Output":"    x_test.go:9: host is not cgroup v2\n"}
{"Action":"output","Package":"m/a","Test":"TestV2","Output":"--- SKIP: TestV2 (0.00s)\n"}
{"Action":"skip","Package":"m/a","Test":"TestV2"}
{"Action":"pass","Package":"m/a","Elapsed":0.2}
`

// runReport runs the command on input with the allowlist text and returns its
// output and exit code.
func runReport(t *testing.T, input, allow string) (string, int) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "allow")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(allow)
	f.Close()
	cmd := exec.Command(os.Args[0], "-allow", f.Name())
	cmd.Env = append(os.Environ(), "TESTREPORT_MAIN=1")
	cmd.Stdin = strings.NewReader(input)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

func TestMain(m *testing.M) {
	if os.Getenv("TESTREPORT_MAIN") == "1" {
		os.Args = append([]string{os.Args[0]}, os.Args[len(os.Args)-2:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestSkipAllowlist(t *testing.T) {
	out, code := runReport(t, sample, "")
	if code != 1 || !strings.Contains(out, "not on the allowlist") || !strings.Contains(out, "host is not cgroup v2") ||
		!strings.HasSuffix(strings.TrimSpace(out), "1 passed, 0 failed, 1 skipped") {
		t.Errorf("unlisted skip: exit %d\n%s", code, out)
	}
	out, code = runReport(t, sample, "a TestV*  # the v1/v2 pair\n")
	if code != 0 || strings.Contains(out, "not on the allowlist") {
		t.Errorf("listed skip: exit %d\n%s", code, out)
	}
}

func TestFailuresAndNothingRun(t *testing.T) {
	failing := strings.Replace(sample, `"Action":"pass","Package":"m/a","Test":"TestOK"`, `"Action":"fail","Package":"m/a","Test":"TestOK"`, 1)
	if out, code := runReport(t, failing, "a TestV2\n"); code != 1 || !strings.Contains(out, "--- FAIL m/a TestOK") {
		t.Errorf("failure: exit %d\n%s", code, out)
	}
	if out, code := runReport(t, `{"Action":"pass","Package":"m/a"}`+"\n", ""); code != 1 || !strings.Contains(out, "no test ran") {
		t.Errorf("nothing ran: exit %d\n%s", code, out)
	}
	if out, code := runReport(t, "m/b: build failed\n"+`{"Action":"fail","Package":"m/b"}`+"\n"+sample, "a TestV2\n"); code != 1 || !strings.Contains(out, "build failed") {
		t.Errorf("package failure: exit %d\n%s", code, out)
	}
}

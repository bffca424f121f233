package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestFindDaemon(t *testing.T) {
	dir := t.TempDir()
	touch := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notOnPath := func(string) (string, error) { return "", exec.ErrNotFound }
	onPath := func(string) (string, error) { return "/usr/local/bin/dsecd", nil }
	self := touch("dsec-race", 0o755)

	if _, err := findDaemon(self, notOnPath); err == nil || !strings.Contains(err.Error(), "dsecd") {
		t.Fatalf("no dsecd anywhere: %v, want an error naming dsecd", err)
	}
	if got, err := findDaemon(self, onPath); err != nil || got != "/usr/local/bin/dsecd" {
		t.Fatalf("dsecd on PATH only: %q %v", got, err)
	}
	touch("dsecd-race", 0o644) // not executable: skipped
	plain := touch("dsecd", 0o755)
	if got, err := findDaemon(self, onPath); err != nil || got != plain {
		t.Fatalf("dsecd next to dsec-race: %q %v, want %s (before PATH)", got, err, plain)
	}
	race := filepath.Join(dir, "dsecd-race")
	if err := os.Chmod(race, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := findDaemon(self, onPath); err != nil || got != race {
		t.Fatalf("dsecd-race next to dsec-race: %q %v, want %s", got, err, race)
	}
}

// TestDaemonCommands builds dsec and dsecd side by side and checks what a user
// sees: dsec lists every dsecd command, `dsec server --help` is dsecd's, and
// without dsecd the error names it.
func TestDaemonCommands(t *testing.T) {
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/dsec-dev/dsec/cmd/dsec", "github.com/dsec-dev/dsec/cmd/dsecd")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dsec, dsecd := filepath.Join(dir, "dsec"), filepath.Join(dir, "dsecd")
	run := func(bin string, args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "PATH=/nonexistent")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}

	daemonHelp, err := run(dsecd, "--help")
	if err != nil {
		t.Fatalf("dsecd --help: %v\n%s", err, daemonHelp)
	}
	clientHelp, err := run(dsec, "--help")
	if err != nil {
		t.Fatalf("dsec --help: %v\n%s", err, clientHelp)
	}
	daemonCmds, clientCmds := commands(daemonHelp), commands(clientHelp)
	if len(daemonCmds) == 0 {
		t.Fatalf("dsecd --help lists no commands:\n%s", daemonHelp)
	}
	for _, c := range daemonCmds {
		if !slices.Contains(clientCmds, c) {
			t.Errorf("dsecd has %q, dsec does not list it:\n%s", c, clientHelp)
		}
	}

	want, err := run(dsecd, "server", "--help")
	if err != nil || !strings.Contains(want, "--data-dir") {
		t.Fatalf("dsecd server --help: %v\n%s", err, want)
	}
	if got, err := run(dsec, "server", "--help"); err != nil || got != want {
		t.Errorf("dsec server --help: %v\n%s\nwant dsecd's:\n%s", err, got, want)
	}
	// Flags and exit statuses are dsecd's.
	out, err := run(dsec, "image", "--no-such-flag")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(out, "dsecd: unknown flag: --no-such-flag") {
		t.Errorf("dsec image --no-such-flag: %v\n%s", err, out)
	}

	// A layerd holder started by an older, all-in-one dsec restarts layerd as
	// `dsec layerd`: dsecd answers it.
	if out, err := run(dsec, "layerd"); !errors.As(err, &ee) || !strings.Contains(out, "dsecd: layerd is started by the node agent") {
		t.Errorf("dsec layerd: %v\n%s", err, out)
	}

	if err := os.Remove(dsecd); err != nil {
		t.Fatal(err)
	}
	out, err = run(dsec, "server")
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(out, "dsec server: dsecd, the daemon binary, not found") {
		t.Errorf("dsec server without dsecd: %v\n%s", err, out)
	}
}

// commands are the names under "Available Commands:" in cobra's help, without
// cobra's own (help, completion).
func commands(help string) []string {
	_, list, ok := strings.Cut(help, "Available Commands:\n")
	if !ok {
		return nil
	}
	var out []string
	for _, line := range strings.Split(list, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			break
		}
		if f[0] != "help" && f[0] != "completion" {
			out = append(out, f[0])
		}
	}
	return out
}

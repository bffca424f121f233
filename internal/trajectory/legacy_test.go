package trajectory_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/internal/trajectory/trajtest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// copyTree copies the fixture so the stores may write to it.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if fi.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestLegacyLog replays a log written by the HTTP-level step runner (raw /v1
// answers; testdata/legacy-v1, written by TestWriteLegacyTrajFixture before the
// decorator existed) through the decorator: every step replays as its typed
// result, the unfinished step is unknown, and a rebuild re-executes the old steps.
func TestLegacyLog(t *testing.T) {
	for _, kind := range []string{"pebble", "bolt"} {
		t.Run(kind, func(t *testing.T) {
			var store trajectory.Store
			var err error
			if kind == "pebble" {
				store, err = trajectory.OpenPebble(copyTree(t, "testdata/legacy-v1/pebble"), trajectory.PebbleOptions{})
			} else {
				store, err = trajectory.OpenBolt(copyTree(t, "testdata/legacy-v1/trajectories.db"))
			}
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			legacyReplay(t, store, "legacy-"+kind)
		})
	}
}

func legacyReplay(t *testing.T, store trajectory.Store, traj string) {
	fake := trajtest.NewNode(t)
	svc := trajectory.Wrap(fake, store, trajectory.Options{TempDir: t.TempDir()})
	const sb = "sb-1" // the fixture's sandbox, gone now
	n := 0
	next := func() (context.Context, *session.StepOutcome) {
		n++
		return session.WithStep(context.Background(), session.Step{Trajectory: traj, N: n})
	}
	replayed := func(out *session.StepOutcome, err error, what string) {
		t.Helper()
		if err != nil || !out.Replayed {
			t.Fatalf("step %d (%s): replayed %v, err %v", n, what, out.Replayed, err)
		}
	}
	ctx, out := next() // 1
	res, err := svc.Exec(ctx, sb, api.ExecRequest{Cmd: []string{"echo", "one"}})
	replayed(out, err, "exec")
	if res.Stdout != "one\n" || !res.Replayed {
		t.Fatalf("exec: %+v", res)
	}
	ctx, out = next() // 2
	if res, err = svc.Exec(ctx, sb, api.ExecRequest{Cmd: []string{"exit", "3"}}); err != nil || res.ExitCode != 3 {
		t.Fatalf("exit 3: %+v %v", res, err)
	}
	for _, c := range []struct {
		req   api.ExecRequest
		stdin string
		want  string
	}{{api.ExecRequest{Cmd: []string{"echo", "streamed"}}, "", "streamed\n"}, {api.ExecRequest{Cmd: []string{"cat"}, Stdin: "in"}, "", "in"}} {
		ctx, out = next() // 3, 4
		var buf bytes.Buffer
		pid := 0
		res, err = svc.ExecStream(ctx, sb, c.req, session.Stream{Stdout: &buf, Stderr: io.Discard, Started: func(p int) { pid = p }})
		replayed(out, err, "exec_stream")
		if buf.String() != c.want || pid == 0 || !res.Replayed || res.ExitCode != 0 {
			t.Fatalf("stream: %q pid %d %+v", buf.String(), pid, res)
		}
	}
	ctx, out = next() // 5
	p, err := svc.StartProcess(ctx, sb, api.ExecRequest{Cmd: []string{"echo", "bg"}})
	replayed(out, err, "start_process")
	if p.ID == "" {
		t.Fatalf("process: %+v", p)
	}
	ctx, out = next() // 6
	fs, err := svc.FS(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	fi, err := fs.WriteFile(ctx, "/f.txt", 0o600, strings.NewReader("hello"), 1<<20)
	replayed(out, err, "write_file")
	if fi.Size != 5 || fi.Name != "f.txt" {
		t.Fatalf("write: %+v", fi)
	}
	ctx, out = next() // 7
	rc, fi, err := fs.Open(ctx, "/f.txt")
	replayed(out, err, "read_file")
	if b, _ := io.ReadAll(rc); string(b) != "hello" || fi.Size != 5 || fi.Mode != 0o600 || fi.ModTime.IsZero() {
		t.Fatalf("read: %q %+v", b, fi)
	}
	ctx, out = next() // 8
	_, err = fs.Mkdir(ctx, "/d", 0o755, true)
	replayed(out, err, "mkdir")
	ctx, out = next() // 9
	err = fs.Remove(ctx, "/nope", false)
	if !errdefs.Is(err, api.CodeNotFound) || !out.Replayed {
		t.Fatalf("remove /nope: %v %v", err, out.Replayed)
	}
	ctx, out = next() // 10
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	tw.WriteHeader(&tar.Header{Name: "a.txt", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg, ModTime: time.Unix(1700000000, 0)})
	tw.Write([]byte("hi"))
	tw.Close()
	replayed(out, fs.ExtractTar(ctx, "/d", &tb), "upload_archive")
	ctx, out = next() // 11
	replayed(out, fs.Remove(ctx, "/d/a.txt", false), "remove")
	ctx, out = next() // 12
	resp, err := svc.HTTP(ctx, sb, 8080, session.HTTPRequest{Method: "POST", Path: "/x/y?q=1", Header: http.Header{},
		Body: strings.NewReader("ping"), ContentLength: 4})
	replayed(out, err, "http")
	if b, _ := io.ReadAll(resp.Body); resp.Status != 201 || string(b) != "app POST /x/y?q=1" || resp.Header.Get("X-App") != "yes" {
		t.Fatalf("http: %d %q %v", resp.Status, b, resp.Header)
	}
	ctx, out = next() // 13
	_, _, err = fs.Open(ctx, "/none")
	if !errdefs.Is(err, api.CodeNotFound) || !out.Replayed {
		t.Fatalf("read /none: %v", err)
	}
	ctx, out = next() // 14
	want := `1\n`     // the fixture sent a backslash and an n
	fc, err := svc.FnCall(ctx, api.FnCallRequest{Language: "python3", Files: map[string]string{"main.py": "print(1)"},
		Tests: []api.FnCallTest{{Stdin: "x", ExpectedOutput: &want}}})
	replayed(out, err, "fncall")
	if fc.Verdict != api.VerdictAccepted || len(fc.Tests) != 1 || fc.Tests[0].Stdout != "1\n" {
		t.Fatalf("fncall: %+v", fc)
	}
	if fake.Faults.Runs() != 0 {
		t.Fatalf("replays ran %d operations", fake.Faults.Runs())
	}
	// Step 15 was started by a server that died.
	tr, err := svc.GetTrajectory(context.Background(), traj)
	if err != nil || len(tr.Steps) != 15 || tr.Steps[14].State != api.StepUnknown {
		t.Fatalf("log: %+v %v", tr, err)
	}
	if s := tr.Steps[0]; s.Status != 200 || !strings.Contains(string(s.Result), `"one\n"`) {
		t.Fatalf("legacy step shown as %+v", s)
	}
	if s := tr.Steps[2]; !strings.Contains(string(s.Body), `"exit"`) || !strings.Contains(string(s.Body), `"c3RyZWFtZWQK"`) { // base64 of "streamed\n"
		t.Fatalf("legacy stream shown as %s", s.Body)
	}
	// The sandbox is gone: a new step is lost, a rebuild re-executes the old steps.
	ctx, _ = session.WithStep(context.Background(), session.Step{Trajectory: traj, N: 16})
	_, err = svc.Exec(ctx, sb, api.ExecRequest{Cmd: []string{"echo"}})
	if !errdefs.Is(err, api.CodeTrajectorySandboxLost) {
		t.Fatalf("step 16: %v", err)
	}
	rb, err := svc.RebuildTrajectory(context.Background(), traj)
	if err != nil || rb.Reexecuted != 10 || rb.Mismatched != 0 {
		t.Fatalf("rebuild: %+v %v", rb, err)
	}
	plain, err := fake.FS(context.Background(), rb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	rc, _, err = plain.Open(context.Background(), "/f.txt")
	if b, _ := io.ReadAll(rc); err != nil || string(b) != "hello" {
		t.Fatalf("rebuilt: %q %v", b, err)
	}
}

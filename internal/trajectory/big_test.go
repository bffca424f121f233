package trajectory_test

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/trajectory"
	"github.com/dsec-dev/dsec/internal/trajectory/trajtest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestBigRead: a file read over the log's cap passes through as it is read, is
// logged as its size and hash once all its bytes were read (the reader need not
// see EOF), and cannot be replayed; one closed early is of unknown outcome.
func TestBigRead(t *testing.T) {
	ctx := context.Background()
	fake := trajtest.NewNode(t)
	svc := trajectory.Wrap(fake, trajectory.NewMem(), trajectory.Options{TempDir: t.TempDir()})
	sb, err := fake.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), trajectory.MaxBodyLog+100)
	plain, _ := fake.FS(ctx, sb.ID)
	if _, err := plain.WriteFile(ctx, "/tmp/big", 0o644, bytes.NewReader(big), 1<<30); err != nil {
		t.Fatal(err)
	}
	read := func(n int, all bool) error {
		c, _ := session.WithStep(ctx, session.Step{Trajectory: "big", N: n})
		fs, err := svc.FS(c, sb.ID)
		if err != nil {
			return err
		}
		defer fs.Close()
		rc, info, err := fs.Open(c, "/tmp/big")
		if err != nil {
			return err
		}
		defer rc.Close()
		want := info.Size
		if !all {
			want = 1000
		}
		var got bytes.Buffer
		if _, err := io.CopyN(&got, rc, want); err != nil {
			return err
		}
		if all && !bytes.Equal(got.Bytes(), big) {
			t.Fatalf("read %d bytes, not the file", got.Len())
		}
		return nil
	}
	if err := read(1, true); err != nil {
		t.Fatal(err)
	}
	tr, err := svc.GetTrajectory(ctx, "big")
	if err != nil || tr.Steps[0].State != api.StepFinished || !tr.Steps[0].Truncated ||
		tr.Steps[0].BodySize != int64(len(big)) || tr.Steps[0].BodySHA256 != trajectory.SHA256(big) {
		t.Fatalf("logged: %+v %v", tr.Steps, err)
	}
	if err := read(1, true); !errdefs.Is(err, api.CodeConflict) {
		t.Fatalf("replay of a truncated step: %v", err)
	}
	if err := read(2, false); err != nil {
		t.Fatal(err)
	}
	if tr, _ = svc.GetTrajectory(ctx, "big"); tr.Steps[1].State != api.StepUnknown {
		t.Fatalf("cut read: %+v", tr.Steps[1])
	}
}

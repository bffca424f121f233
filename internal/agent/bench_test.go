package agent_test

import (
	"context"
	"io"
	"testing"

	"github.com/dsec-dev/dsec/internal/agent"
	"github.com/dsec-dev/dsec/internal/backend/driver/drivertest"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// benchPTY measures a keystroke's round trip through the session service's
// ExecStream with a TTY (what a front end calls): stdin stream → driver →
// terminal → cat → terminal → driver → stdout stream.
func benchPTY(b *testing.B, m *agent.Manager, create api.CreateSandboxRequest) {
	ctx := context.Background()
	sb, err := m.Create(ctx, create)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Delete(ctx, sb.ID)
	inR, inW := io.Pipe()
	out := drivertest.NewEchoes()
	ctl := make(chan session.Control, 1)
	done := make(chan error, 1)
	go func() {
		_, err := m.ExecStream(ctx, sb.ID, api.ExecRequest{Shell: drivertest.EchoScript, TTY: true},
			session.Stream{Stdin: inR, Stdout: out, Control: ctl})
		done <- err
	}()
	drivertest.KeystrokeRoundTrips(b, inW, out)
	out.Drain()
	ctl <- session.Control{Signal: 9} // a raw terminal has no EOF: end cat
	inW.Close()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

func BenchmarkPTYMock(b *testing.B) {
	e := newMockEnv(b)
	benchPTY(b, e.open(b), api.CreateSandboxRequest{})
}

func BenchmarkPTYContainer(b *testing.B) {
	e := newEnv(b)
	benchPTY(b, e.open(b, nil), api.CreateSandboxRequest{Image: "busybox"})
}

package noderpc_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// The added latency of the node RPC: the same operation on one container-backed
// agent, called in-process and through Client → h2c → handler, alternately in
// one loop (so both see the same machine load; root, the default image). Each
// reports p50 and p99 of both paths and their ratios:
//
//	go test -run XXX -bench . -benchtime 300x ./internal/cluster/noderpc
func BenchmarkExecTrue(b *testing.B) {
	m := containerAgent(b)
	c := serve(b, m, noderpcOpts()).client(b, nil)
	ctx := context.Background()
	sb, err := m.Create(ctx, api.CreateSandboxRequest{Backend: api.BackendContainer})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Delete(ctx, sb.ID)
	compare(b, m, c, func(svc session.Service) error {
		res, err := svc.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d", res.ExitCode)
		}
		return err
	})
}

func BenchmarkCreateDelete(b *testing.B) {
	m := containerAgent(b)
	c := serve(b, m, noderpcOpts()).client(b, nil)
	ctx := context.Background()
	compare(b, m, c, func(svc session.Service) error {
		sb, err := svc.Create(ctx, api.CreateSandboxRequest{Backend: api.BackendContainer})
		if err != nil {
			return err
		}
		if err := svc.Delete(ctx, sb.ID); err != nil {
			return fmt.Errorf("delete %s: %w", sb.ID, err)
		}
		return nil
	})
}

// BenchmarkCallOverhead is the wire alone: a unary call (Get) to a fake
// service that answers at once (no root).
func BenchmarkCallOverhead(b *testing.B) {
	f := &fakeService{}
	c := serve(b, f, noderpcOpts()).client(b, nil)
	ctx := context.Background()
	compare(b, f, c, func(svc session.Service) error {
		_, err := svc.Get(ctx, "sb-1")
		return err
	})
}

// compare runs op on the in-process service and through the client, one after
// the other in every iteration (taking turns at going first), and reports both
// latency distributions.
func compare(b *testing.B, local, remote session.Service, op func(session.Service) error) {
	var lat [2][]time.Duration
	svcs := []session.Service{local, remote}
	for n := 0; b.Loop(); n++ {
		for k := range 2 {
			i := (n + k) % 2 // each path goes first every other iteration
			svc := svcs[i]
			t0 := time.Now()
			if err := op(svc); err != nil {
				b.Fatalf("%s after %d: %v", [2]string{"in-process", "rpc"}[i], len(lat[i]), err)
			}
			lat[i] = append(lat[i], time.Since(t0))
		}
	}
	var p [2][2]float64 // [path][p50, p99] in µs
	for i := range lat {
		slices.Sort(lat[i])
		for j, q := range []float64{0.50, 0.99} {
			p[i][j] = float64(lat[i][min(len(lat[i])-1, int(q*float64(len(lat[i]))))]) / float64(time.Microsecond)
		}
	}
	b.ReportMetric(p[0][0], "inproc-p50-µs")
	b.ReportMetric(p[0][1], "inproc-p99-µs")
	b.ReportMetric(p[1][0], "rpc-p50-µs")
	b.ReportMetric(p[1][1], "rpc-p99-µs")
	b.ReportMetric(p[1][0]/p[0][0], "p50-ratio")
	b.ReportMetric(p[1][1]/p[0][1], "p99-ratio")
}

package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/dsec-dev/dsec/internal/project"
	"github.com/dsec-dev/dsec/internal/project/projecttest"
)

// TestProjectsConformance runs the project.Store suite on etcd: A and B are two
// API servers' stores, each with its own client and watches, on one real
// (embedded) etcd.
func TestProjectsConformance(t *testing.T) {
	cli := testEtcd(t)
	ep := cli.Endpoints()[0]
	var n atomic.Int64
	projecttest.Run(t, func(t *testing.T) projecttest.Stores {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		prefix := fmt.Sprintf("/pt%d/", n.Add(1))
		dir := t.TempDir()
		const admin = "admin-token-0123456789"
		if err := os.WriteFile(filepath.Join(dir, "token"), []byte(admin), 0o600); err != nil {
			t.Fatal(err)
		}
		open := func(name string) *Projects {
			c, err := Connect(ctx, ClientConfig{Endpoints: ep})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			toks, err := OpenTokens(ctx, c, prefix, filepath.Join(dir, "token"), name, quiet())
			if err != nil {
				t.Fatal(err)
			}
			p, err := OpenProjects(ctx, c, prefix, toks, quiet())
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		return projecttest.Stores{A: open("api1"), B: open("api2"), AdminToken: admin}
	})
}

// BenchmarkQuota is the quota's cost per create on one etcd member in this
// process: a Reserve (create) and a Release (delete) of one sandbox.
func BenchmarkQuota(b *testing.B) {
	cli := testEtcd(b)
	ctx := context.Background()
	dir := b.TempDir()
	toks, err := OpenTokens(ctx, cli, "/bq/", filepath.Join(dir, "token"), "bench", quiet())
	if err != nil {
		b.Fatal(err)
	}
	st, err := OpenProjects(ctx, cli, "/bq/", toks, quiet())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := st.Create(ctx, "p", project.Quota{MaxSandboxes: 1 << 40}); err != nil {
		b.Fatal(err)
	}
	one := project.Usage{Sandboxes: 1, MilliCPU: 1000, MemoryBytes: 512 << 20}
	var ids []string
	b.Run("reserve", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			id := project.NewReservationID()
			if err := st.Reserve(ctx, "p", project.Reservation{ID: id, Usage: one}); err != nil {
				b.Fatal(err)
			}
			ids = append(ids, id)
		}
	})
	b.Run("release", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := st.Release(ctx, "p", ids[i%len(ids)], one); err != nil {
				b.Fatal(err)
			}
		}
	})
}

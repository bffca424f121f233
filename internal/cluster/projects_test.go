package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

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

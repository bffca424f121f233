// Package projecttest is the conformance suite every project.Store passes.
package projecttest

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/project"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Stores is what the suite runs on: two handles on one shared state (two API
// servers on one etcd; for a one-process store the same one twice) and the
// default project's token.
type Stores struct {
	A, B       project.Store
	AdminToken string
}

// Run runs the suite; newStores returns fresh, empty shared state.
func Run(t *testing.T, newStores func(t *testing.T) Stores) {
	ctx := context.Background()
	one := project.Usage{Sandboxes: 1, MilliCPU: 1000, MemoryBytes: 512 << 20}

	t.Run("default project and tokens", func(t *testing.T) {
		s := newStores(t)
		if p, ok := s.A.Identify(s.AdminToken); !ok || p != project.Default {
			t.Fatalf("admin token: %q %v", p, ok)
		}
		if _, ok := s.A.Identify(""); ok {
			t.Fatal("the empty token identifies")
		}
		if _, ok := s.A.Identify(s.AdminToken + "x"); ok {
			t.Fatal("a wrong token identifies")
		}
		tok, err := s.A.Create(ctx, "team-a", project.Quota{MaxSandboxes: 3})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "B knows the new token", func() bool { p, ok := s.B.Identify(tok); return ok && p == "team-a" })
		if _, err := s.B.Create(ctx, "team-a", project.Quota{}); !errdefs.Is(err, api.CodeAlreadyExists) {
			t.Fatalf("second create: %v", err)
		}
		if _, err := s.A.Create(ctx, project.Default, project.Quota{}); !errdefs.Is(err, api.CodeAlreadyExists) {
			t.Fatalf("create default: %v", err)
		}
		for _, bad := range []string{"", "A", "-x", "a/b", strings.Repeat("x", 64)} {
			if _, err := s.A.Create(ctx, bad, project.Quota{}); !errdefs.Is(err, api.CodeInvalidArgument) {
				t.Errorf("create %q: %v", bad, err)
			}
		}
		if _, err := s.A.Create(ctx, "neg", project.Quota{MaxSandboxes: -1}); !errdefs.Is(err, api.CodeInvalidArgument) {
			t.Errorf("negative quota: %v", err)
		}
		tok2, err := s.B.AddToken(ctx, "team-a")
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "A knows the added token", func() bool { p, ok := s.A.Identify(tok2); return ok && p == "team-a" })
		in, err := s.A.Get(ctx, "team-a")
		if err != nil || len(in.Tokens) != 2 || in.Quota.MaxSandboxes != 3 {
			t.Fatalf("get: %+v %v", in, err)
		}
		if err := s.A.RemoveToken(ctx, "team-a", project.TokenID(project.Digest(tok))); err != nil {
			t.Fatal(err)
		}
		eventually(t, "B forgets the removed token", func() bool { _, ok := s.B.Identify(tok); return !ok })
		if _, ok := s.B.Identify(tok2); !ok {
			t.Fatal("the other token went too")
		}
		if err := s.A.RemoveToken(ctx, project.Default, project.TokenID(project.Digest(s.AdminToken))); !errdefs.Is(err, api.CodeConflict) {
			t.Fatalf("removing the default project's last token: %v", err)
		}
		if _, err := s.A.AddToken(ctx, "nobody"); !errdefs.Is(err, api.CodeNotFound) {
			t.Fatalf("token for an unknown project: %v", err)
		}
		list, err := s.B.List(ctx)
		if err != nil || len(list) != 2 || list[0].Name != project.Default || list[1].Name != "team-a" {
			t.Fatalf("list: %+v %v", list, err)
		}
		if err := s.A.Delete(ctx, project.Default); !errdefs.Is(err, api.CodeInvalidArgument) {
			t.Fatalf("delete default: %v", err)
		}
		if err := s.A.Delete(ctx, "team-a"); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the project's tokens go with it", func() bool { _, ok := s.B.Identify(tok2); return !ok })
		if _, err := s.B.Get(ctx, "team-a"); !errdefs.Is(err, api.CodeNotFound) {
			t.Fatalf("get after delete: %v", err)
		}
	})

	t.Run("registry credentials: set, replace, remove; hosts shown, never passwords", func(t *testing.T) {
		s := newStores(t)
		if _, err := s.A.Create(ctx, "team-a", project.Quota{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.A.Create(ctx, "team-b", project.Quota{MaxSandboxes: 2}); err != nil {
			t.Fatal(err)
		}
		if got := s.B.RegistryAuth("team-a"); got != nil {
			t.Fatalf("credentials before any were set: %v", got)
		}
		eventually(t, "B sees team-a", func() bool { _, ok := s.B.Limits("team-a"); return ok })
		ghcr := api.RegistryAuth{Username: "robot", Password: "s3cret-ghcr"}
		if err := s.B.SetRegistryAuth(ctx, "team-a", "ghcr.io", ghcr); err != nil {
			t.Fatal(err)
		}
		// Docker Hub's other names are docker.io; hosts are lower case.
		hub := api.RegistryAuth{Username: "me", Password: "s3cret-hub"}
		if err := s.A.SetRegistryAuth(ctx, "team-a", "Registry-1.Docker.IO", hub); err != nil {
			t.Fatal(err)
		}
		if err := s.A.SetRegistryAuth(ctx, "team-a", "localhost:5000", hub); err != nil {
			t.Fatal(err)
		}
		want := map[string]api.RegistryAuth{"ghcr.io": ghcr, "docker.io": hub, "localhost:5000": hub}
		for _, st := range []project.Store{s.A, s.B} {
			eventually(t, "both stores answer the credentials from memory", func() bool {
				return reflect.DeepEqual(st.RegistryAuth("team-a"), want)
			})
		}
		if got := s.A.RegistryAuth("team-b"); got != nil {
			t.Fatalf("another project has team-a's credentials: %v", got)
		}
		hosts := []string{"docker.io", "ghcr.io", "localhost:5000"}
		in, err := s.B.Get(ctx, "team-a")
		if err != nil || !reflect.DeepEqual(in.Registries, hosts) {
			t.Fatalf("get: registries %v, want %v (%v)", in.Registries, hosts, err)
		}
		list, err := s.A.List(ctx)
		if err != nil || len(list) != 3 || !reflect.DeepEqual(list[1].Registries, hosts) || list[2].Registries != nil {
			t.Fatalf("list: %+v %v", list, err)
		}
		if b, _ := json.Marshal(in.ToAPI()); strings.Contains(string(b), "s3cret") || !strings.Contains(string(b), `"registries":["docker.io","ghcr.io","localhost:5000"]`) {
			t.Fatalf("the project as the API shows it: %s", b)
		}
		// Replace.
		ghcr2 := api.RegistryAuth{Username: "robot2", Password: "s3cret-2"}
		if err := s.A.SetRegistryAuth(ctx, "team-a", "ghcr.io", ghcr2); err != nil {
			t.Fatal(err)
		}
		eventually(t, "B sees the replaced credentials", func() bool { return s.B.RegistryAuth("team-a")["ghcr.io"] == ghcr2 })
		// Remove (by any of Docker Hub's names).
		if err := s.B.RemoveRegistryAuth(ctx, "team-a", "index.docker.io"); err != nil {
			t.Fatal(err)
		}
		eventually(t, "A forgets the removed credentials", func() bool { _, ok := s.A.RegistryAuth("team-a")["docker.io"]; return !ok })
		if err := s.A.RemoveRegistryAuth(ctx, "team-a", "docker.io"); !errdefs.Is(err, api.CodeNotFound) {
			t.Fatalf("removing twice: %v", err)
		}
		if err := s.A.RemoveRegistryAuth(ctx, "team-b", "ghcr.io"); !errdefs.Is(err, api.CodeNotFound) {
			t.Fatalf("removing another project's: %v", err)
		}
		// Bad input and unknown projects.
		if err := s.A.SetRegistryAuth(ctx, "nobody", "ghcr.io", ghcr); !errdefs.Is(err, api.CodeNotFound) {
			t.Fatalf("unknown project: %v", err)
		}
		if err := s.A.RemoveRegistryAuth(ctx, "nobody", "ghcr.io"); !errdefs.Is(err, api.CodeNotFound) {
			t.Fatalf("remove, unknown project: %v", err)
		}
		for _, bad := range []string{"", "https://ghcr.io", "ghcr.io/org", "user@ghcr.io", "ghcr.io:0", "ghcr.io:99999", "ghcr.io:x", "a b", "-x.io", "[::1"} {
			if err := s.A.SetRegistryAuth(ctx, "team-a", bad, ghcr); !errdefs.Is(err, api.CodeInvalidArgument) {
				t.Errorf("host %q: %v", bad, err)
			}
		}
		for _, good := range []string{"127.0.0.1:5000", "[::1]:5000", "my-registry.example.com"} {
			if err := s.A.SetRegistryAuth(ctx, "team-b", good, ghcr); err != nil {
				t.Errorf("host %q: %v", good, err)
			}
		}
		for field, a := range map[string]api.RegistryAuth{"username": {Password: "p"}, "password": {Username: "u"}} {
			err := s.A.SetRegistryAuth(ctx, "team-a", "ghcr.io", a)
			if !errdefs.Is(err, api.CodeInvalidArgument) || !strings.Contains(err.Error(), field) {
				t.Errorf("without a %s: %v", field, err)
			}
		}
		if got := s.A.RegistryAuth("team-a")["ghcr.io"]; got != ghcr2 {
			t.Fatalf("a refused change changed the credentials: %v", got)
		}
		// The default project holds credentials too.
		if err := s.A.SetRegistryAuth(ctx, project.Default, "ghcr.io", ghcr); err != nil {
			t.Fatal(err)
		}
		eventually(t, "B sees default's credentials", func() bool { return s.B.RegistryAuth(project.Default)["ghcr.io"] == ghcr })
		// A project's removal takes its credentials; a new project of the
		// same name starts without.
		if err := s.B.Delete(ctx, "team-a"); err != nil {
			t.Fatal(err)
		}
		for _, st := range []project.Store{s.A, s.B} {
			eventually(t, "the removed project's credentials are gone", func() bool { return st.RegistryAuth("team-a") == nil })
		}
		if _, err := s.A.Create(ctx, "team-a", project.Quota{}); err != nil {
			t.Fatal(err)
		}
		if in, err := s.A.Get(ctx, "team-a"); err != nil || in.Registries != nil || s.A.RegistryAuth("team-a") != nil {
			t.Fatalf("the new team-a: %+v %v", in.Registries, err)
		}
	})

	t.Run("reserve within the quota, refuse past it, release", func(t *testing.T) {
		s := newStores(t)
		if _, err := s.A.Create(ctx, "p", project.Quota{MaxSandboxes: 3, MilliCPU: 2500, MemoryBytes: 4 << 30}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "B sees p", func() bool { _, ok := s.B.Limits("p"); return ok })
		if err := s.A.Reserve(ctx, "p", project.Reservation{ID: "r1", Usage: one}); err != nil {
			t.Fatal(err)
		}
		if err := s.B.Reserve(ctx, "p", project.Reservation{ID: "r2", Usage: one}); err != nil {
			t.Fatal(err)
		}
		// 2 cores used of 2.5: one more core is refused by the CPU quota.
		err := s.A.Reserve(ctx, "p", project.Reservation{ID: "r3", Usage: one})
		if !errdefs.Is(err, api.CodeQuotaExceeded) || !strings.Contains(err.Error(), "cpu quota") {
			t.Fatalf("third core: %v", err)
		}
		half := project.Usage{Sandboxes: 1, MilliCPU: 500, MemoryBytes: 1 << 30}
		if err := s.B.Reserve(ctx, "p", project.Reservation{ID: "r3", Usage: half}); err != nil {
			t.Fatal(err)
		}
		err = s.A.Reserve(ctx, "p", project.Reservation{ID: "r4", Usage: project.Usage{Sandboxes: 1}})
		if !errdefs.Is(err, api.CodeQuotaExceeded) || !strings.Contains(err.Error(), "max_sandboxes") {
			t.Fatalf("fourth sandbox: %v", err)
		}
		usage(t, s.B, "p", project.Usage{Sandboxes: 3, MilliCPU: 2500, MemoryBytes: 2 << 30})
		if err := s.A.Delete(ctx, "p"); !errdefs.Is(err, api.CodeConflict) {
			t.Fatalf("delete with sandboxes: %v", err)
		}
		if err := s.B.Release(ctx, "p", "r1", one); err != nil {
			t.Fatal(err)
		}
		if err := s.B.Release(ctx, "p", "r1", one); err != nil {
			t.Fatal("a second release of the same reservation:", err)
		}
		usage(t, s.A, "p", project.Usage{Sandboxes: 2, MilliCPU: 1500, MemoryBytes: 512<<20 + 1<<30})
		if err := s.A.Reserve(ctx, "p", project.Reservation{ID: "r5", Usage: one}); err != nil {
			t.Fatal("after a release:", err)
		}
		// Memory: 4 GiB.
		if err := s.A.SetQuota(ctx, "p", project.Quota{MemoryBytes: 4 << 30}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "B sees the new quota", func() bool { q, _ := s.B.Limits("p"); return q.MaxSandboxes == 0 })
		err = s.B.Reserve(ctx, "p", project.Reservation{ID: "r6", Usage: project.Usage{Sandboxes: 1, MemoryBytes: 3 << 30}})
		if !errdefs.Is(err, api.CodeQuotaExceeded) || !strings.Contains(err.Error(), "memory_bytes") {
			t.Fatalf("memory: %v", err)
		}
		if err := s.A.Reserve(ctx, "nobody", project.Reservation{ID: "x", Usage: one}); !errdefs.Is(err, api.CodeNotFound) {
			t.Fatalf("unknown project: %v", err)
		}
	})

	t.Run("a batch is one reservation of N members, all or nothing", func(t *testing.T) {
		s := newStores(t)
		if _, err := s.A.Create(ctx, "p", project.Quota{MaxSandboxes: 5}); err != nil {
			t.Fatal(err)
		}
		four := project.Usage{Sandboxes: 4, MilliCPU: 4000, MemoryBytes: 4 << 29}
		if err := s.A.Reserve(ctx, "p", project.Reservation{ID: "b1", Usage: four}); err != nil {
			t.Fatal(err)
		}
		if err := s.B.Reserve(ctx, "p", project.Reservation{ID: "b2", Usage: project.Usage{Sandboxes: 2}}); !errdefs.Is(err, api.CodeQuotaExceeded) {
			t.Fatalf("2 more: %v", err)
		}
		usage(t, s.B, "p", four)
		if err := s.B.Release(ctx, "p", "b1", one); err != nil {
			t.Fatal(err)
		}
		usage(t, s.A, "p", project.Usage{Sandboxes: 3, MilliCPU: 3000, MemoryBytes: 3 << 29})
		rs, err := s.A.Reservations(ctx, "p")
		if err != nil || len(rs) != 1 || rs[0].Usage.Sandboxes != 3 || rs[0].Version == 0 {
			t.Fatalf("reservations: %+v %v", rs, err)
		}
	})

	t.Run("racing creates from two API servers: exactly the quota wins", func(t *testing.T) {
		s := newStores(t)
		const limit, racers = 5, 16
		if _, err := s.A.Create(ctx, "p", project.Quota{MaxSandboxes: limit}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "B sees p", func() bool { _, ok := s.B.Limits("p"); return ok })
		for round := range 3 {
			var won, refused atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range racers {
				st := s.A
				if i%2 == 1 {
					st = s.B
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					err := st.Reserve(ctx, "p", project.Reservation{ID: project.NewReservationID(), Usage: project.Usage{Sandboxes: 1}})
					switch {
					case err == nil:
						won.Add(1)
					case errdefs.Is(err, api.CodeQuotaExceeded):
						refused.Add(1)
					default:
						t.Error(err)
					}
				}()
			}
			close(start)
			wg.Wait()
			if won.Load() != limit || refused.Load() != racers-limit {
				t.Fatalf("round %d: %d won, %d refused; want %d and %d", round, won.Load(), refused.Load(), limit, racers-limit)
			}
			usage(t, s.A, "p", project.Usage{Sandboxes: limit})
			// Concurrent releases, each reservation twice, from both sides.
			rs, _ := s.B.Reservations(ctx, "p")
			for i, r := range append(rs, rs...) {
				st := []project.Store{s.A, s.B}[i%2]
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := st.Release(ctx, "p", r.ID, r.Usage); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			usage(t, s.A, "p", project.Usage{})
		}
	})

	t.Run("adjust compares the reservation's version", func(t *testing.T) {
		s := newStores(t)
		if _, err := s.A.Create(ctx, "p", project.Quota{MaxSandboxes: 2}); err != nil {
			t.Fatal(err)
		}
		// Adopting a reservation nobody has (version 0).
		adopt := project.Reservation{ID: "sb:x", Usage: project.Usage{Sandboxes: 3}}
		if err := s.A.Adjust(ctx, "p", project.Reservation{ID: "sb:x"}, adopt); err != nil {
			t.Fatal(err)
		}
		usage(t, s.B, "p", project.Usage{Sandboxes: 3}) // adopted past the quota: the nodes say so
		if err := s.B.Adjust(ctx, "p", project.Reservation{ID: "sb:x"}, adopt); !errdefs.Is(err, api.CodeConflict) {
			t.Fatalf("adopting twice: %v", err)
		}
		rs, _ := s.B.Reservations(ctx, "p")
		if len(rs) != 1 {
			t.Fatalf("reservations: %+v", rs)
		}
		if err := s.B.Adjust(ctx, "p", rs[0], project.Reservation{ID: "sb:x", Usage: project.Usage{Sandboxes: 1}}); err != nil {
			t.Fatal(err)
		}
		if err := s.A.Adjust(ctx, "p", rs[0], project.Reservation{ID: "sb:x"}); !errdefs.Is(err, api.CodeConflict) {
			t.Fatalf("a stale version: %v", err)
		}
		usage(t, s.A, "p", project.Usage{Sandboxes: 1})
		rs, _ = s.A.Reservations(ctx, "p")
		if err := s.A.Adjust(ctx, "p", rs[0], project.Reservation{ID: "sb:x"}); err != nil {
			t.Fatal(err)
		}
		usage(t, s.B, "p", project.Usage{})
		if rs, _ := s.B.Reservations(ctx, "p"); len(rs) != 0 {
			t.Fatalf("left: %+v", rs)
		}
	})
}

func usage(t *testing.T, st project.Store, name string, want project.Usage) {
	t.Helper()
	in, err := st.Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if in.Usage != want {
		t.Fatalf("usage of %s = %+v, want %+v", name, in.Usage, want)
	}
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if f() {
			return
		}
	}
	t.Fatalf("%s: not within 5 s", what)
}

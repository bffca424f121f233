package envstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/internal/image/envstore"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestState is the atomicity part of the conformance suite: what racing
// writers see, on both states.
func TestState(t *testing.T) {
	t.Run("create races", func(t *testing.T) { forEachState(t, testCreateRace) })
	t.Run("no lost updates", func(t *testing.T) { forEachState(t, testNoLostUpdates) })
	t.Run("compose vs remove layer", func(t *testing.T) { forEachState(t, testComposeVsRemoveLayer) })
}

// testCreateRace: of N creates of one name, exactly one wins; the others are
// already_exists.
func testCreateRace(t *testing.T, s *envstore.Store, bs blob.Store) {
	ctx := context.Background()
	base, _ := buildLayer(t, bs, s, "base", "v1")
	m, err := s.Compose(ctx, "proto", "base", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mm := m
			mm.Name, mm.Description = "one", fmt.Sprint(i)
			_, errs[i] = s.Create(ctx, mm)
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errdefs.Is(err, api.CodeAlreadyExists):
			t.Fatalf("create: %v", err)
		}
	}
	if got, err := s.Get(ctx, "one"); won != 1 || err != nil || got.Layers[0].Digest != base.Digest {
		t.Fatalf("%d creates won (want 1); stored %+v %v", won, got, err)
	}
}

// testNoLostUpdates: writers changing different layers' prefetch lists of one
// environment at once all land (each write is conditional on what it read).
func testNoLostUpdates(t *testing.T, s *envstore.Store, bs blob.Store) {
	ctx := context.Background()
	var digests []string
	var toolkits []string
	for i := range 4 {
		l, _ := buildLayer(t, bs, s, fmt.Sprintf("l%d", i), fmt.Sprint("content", i))
		digests = append(digests, l.Digest)
		if i > 0 {
			toolkits = append(toolkits, fmt.Sprintf("l%d", i))
		}
	}
	if _, err := s.Compose(ctx, "env", "l0", toolkits, ""); err != nil {
		t.Fatal(err)
	}
	list := func(i int) string { return blob.FromBytes([]byte(fmt.Sprint("list", i))) }
	var wg sync.WaitGroup
	for i, d := range digests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.SetPrefetchList(ctx, "env", d, list(i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	e, err := s.Get(ctx, "env")
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range e.Layers {
		if l.PrefetchList != list(i) {
			t.Fatalf("layer %d's prefetch list %q was lost (want %q)", i, l.PrefetchList, list(i))
		}
	}
}

// testComposeVsRemoveLayer: a compose naming a layer and the layer's removal,
// at once: never both succeed (no environment names a removed layer).
func testComposeVsRemoveLayer(t *testing.T, s *envstore.Store, bs blob.Store) {
	ctx := context.Background()
	l, _ := buildLayer(t, bs, s, "base", "v1")
	for i := range 20 {
		if err := s.PutLayer(ctx, envstore.Named("victim", "", l.Layer)); err != nil {
			t.Fatal(err)
		}
		env := fmt.Sprint("e", i)
		var cerr, rerr error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); _, cerr = s.Compose(ctx, env, "base", []string{"victim"}, "") }()
		go func() { defer wg.Done(); rerr = s.Remove(ctx, "victim") }()
		wg.Wait()
		switch {
		case cerr == nil && rerr == nil:
			t.Fatalf("round %d: compose and removal of its layer both succeeded", i)
		case cerr == nil && !errdefs.Is(rerr, api.CodeConflict):
			t.Fatalf("round %d: remove: %v", i, rerr)
		case rerr == nil && !errdefs.Is(cerr, api.CodeNotFound):
			t.Fatalf("round %d: compose: %v", i, cerr)
		}
		if cerr == nil {
			if err := s.Remove(ctx, env); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestEtcdInUse: in a cluster, an environment a node marks in use cannot be
// removed from anywhere; a mark needs the environment to exist; a node's
// marks go when its last sandbox and create are gone.
func TestEtcdInUse(t *testing.T) {
	bs, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("/envstore-inuse-%d/", time.Now().UnixNano())
	st := envstore.NewEtcdState(testEtcd(t), prefix)
	s := envstore.New(st, bs)
	ctx := context.Background()
	buildLayer(t, bs, s, "base", "v1")
	if _, err := s.Compose(ctx, "task", "base", nil, ""); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.MarkUse(ctx, "nope", "n1"); ok || err != nil {
		t.Fatalf("mark of a missing environment: %v %v", ok, err)
	}
	used := map[string]bool{}
	var mu sync.Mutex
	u := &envstore.Uses{State: st, Node: "n1", InUse: func(n string) bool { mu.Lock(); defer mu.Unlock(); return used[n] }}
	if err := u.Load(ctx); err != nil {
		t.Fatal(err)
	}
	done, err := u.Begin(ctx, "task")
	if err != nil {
		t.Fatal(err)
	}
	// A create is in flight: refused, and the answer names the node.
	if err := s.Remove(ctx, "task"); !errdefs.Is(err, api.CodeConflict) || !strings.Contains(err.Error(), "n1") {
		t.Fatalf("remove while a create is in flight: %v", err)
	}
	mu.Lock()
	used["task"] = true // the sandbox exists
	mu.Unlock()
	done()
	u.Sync(ctx, []string{"task"})
	if err := s.Remove(ctx, "task"); !errdefs.Is(err, api.CodeConflict) {
		t.Fatalf("remove while a sandbox uses it: %v", err)
	}
	// Another store (another machine) sees the same marks.
	other := envstore.New(envstore.NewEtcdState(testEtcd(t), prefix), nil)
	if err := other.Remove(ctx, "task"); !errdefs.Is(err, api.CodeConflict) {
		t.Fatalf("remove from another store: %v", err)
	}
	mu.Lock()
	used["task"] = false
	mu.Unlock()
	u.Sync(ctx, nil)
	if m, _ := st.MarkedBy(ctx, "n1"); len(m) != 0 {
		t.Fatalf("marks left: %v", m)
	}
	if err := other.Remove(ctx, "task"); err != nil {
		t.Fatalf("remove once unused: %v", err)
	}
	if _, err := u.Begin(ctx, "task"); err != nil {
		t.Fatalf("begin on a removed environment: %v (the create itself answers not_found)", err)
	}
	if m, _ := st.MarkedBy(ctx, "n1"); len(m) != 0 {
		t.Fatalf("a removed environment was marked: %v", m)
	}
	// A restarted node marks what its sandboxes use again.
	buildLayer(t, bs, s, "base2", "v2")
	if _, err := s.Compose(ctx, "task2", "base2", nil, ""); err != nil {
		t.Fatal(err)
	}
	u2 := &envstore.Uses{State: st, Node: "n2", InUse: func(string) bool { return true }}
	u2.Sync(ctx, []string{"task2"})
	if err := s.Remove(ctx, "task2"); !errdefs.Is(err, api.CodeConflict) {
		t.Fatalf("remove of an environment a restarted node uses: %v", err)
	}
}

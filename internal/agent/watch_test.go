package agent_test

import (
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

// A directory watch is the node's: each read returns the changes since the
// last one, whoever reads.
func TestMockWatch(t *testing.T) {
	e := newMockEnv(t)
	m := e.open(t)
	sb := create(t, m, api.CreateSandboxRequest{})
	ctx := ctxT(t)
	fs, err := m.FS(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	if _, err := fs.Mkdir(ctx, "/w/sub", 0o755, true); err != nil {
		t.Fatal(err)
	}
	w, err := m.CreateWatch(ctx, sb.ID, api.WatchRequest{Path: "/w", Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	if evs, err := m.WatchEvents(ctx, sb.ID, w.ID); err != nil || len(evs) != 0 {
		t.Fatalf("events of an unchanged directory: %+v, %v", evs, err)
	}
	if _, err := fs.WriteFile(ctx, "/w/sub/a", 0o644, strings.NewReader("data"), 1<<20); err != nil {
		t.Fatal(err)
	}
	evs, err := m.WatchEvents(ctx, sb.ID, w.ID)
	if err != nil || len(evs) != 2 || evs[0].Name != "sub/a" || evs[0].Op != api.WatchCreate || evs[1].Op != api.WatchWrite ||
		evs[0].Entry == nil || evs[0].Entry.Size != 4 {
		t.Fatalf("events after a write: %+v, %v", evs, err)
	}
	if err := fs.Remove(ctx, "/w/sub/a", false); err != nil {
		t.Fatal(err)
	}
	evs, err = m.WatchEvents(ctx, sb.ID, w.ID)
	if err != nil || len(evs) != 1 || evs[0].Op != api.WatchRemove || evs[0].Entry != nil {
		t.Fatalf("events after a remove: %+v, %v", evs, err)
	}
	if err := m.RemoveWatch(ctx, sb.ID, w.ID); err != nil {
		t.Fatal(err)
	}
	_, err = m.WatchEvents(ctx, sb.ID, w.ID)
	wantCode(t, "a removed watch", err, api.CodeNotFound)
	_, err = m.CreateWatch(ctx, sb.ID, api.WatchRequest{Path: "/nope"})
	wantCode(t, "a missing directory", err, api.CodeNotFound)
	if _, err := fs.WriteFile(ctx, "/w/file", 0o644, strings.NewReader("x"), 1<<20); err != nil {
		t.Fatal(err)
	}
	_, err = m.CreateWatch(ctx, sb.ID, api.WatchRequest{Path: "/w/file"})
	wantCode(t, "a file", err, api.CodeInvalidArgument)
	// A watch whose directory goes is gone too.
	gone, err := m.CreateWatch(ctx, sb.ID, api.WatchRequest{Path: "/w/sub"})
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Remove(ctx, "/w/sub", true); err != nil {
		t.Fatal(err)
	}
	_, err = m.WatchEvents(ctx, sb.ID, gone.ID)
	wantCode(t, "a watch of a removed directory", err, api.CodeNotFound)
	_, err = m.WatchEvents(ctx, sb.ID, gone.ID)
	wantCode(t, "a watch of a removed directory, again", err, api.CodeNotFound)
	for i := 0; ; i++ {
		if _, err := m.CreateWatch(ctx, sb.ID, api.WatchRequest{Path: "/w"}); err != nil {
			if i != 64 {
				t.Fatalf("watch %d refused: %v", i, err)
			}
			wantCode(t, "the 65th watch", err, api.CodeResourceExhausted)
			break
		}
	}
}

package buildstate_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsec-dev/dsec/internal/cluster/etcdtest"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/buildstate"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/pkg/api"
)

func testEtcd(t *testing.T) *clientv3.Client { return etcdtest.Start(t) }

func entry(msg string) e2bapi.BuildLogEntry {
	return e2bapi.BuildLogEntry{Timestamp: time.Now().UTC(), Level: e2bapi.LogLevelInfo, Message: msg}
}

// TestEtcdStoreAcrossAPIServers: two stores over one etcd are two API
// servers: a build created, started and logged through one is read through
// the other, files uploaded through one are read through the other (in etcd,
// and in a blob store), a build is started once, and a build whose runner's
// lease is gone ends as an error naming the runner, which can then not end
// it otherwise.
func TestEtcdStoreAcrossAPIServers(t *testing.T) {
	cli := testEtcd(t)
	ctx := context.Background()
	a := buildstate.NewEtcd(buildstate.EtcdConfig{Client: cli, Runner: "api-a", RunnerTTL: 2 * time.Second})
	b := buildstate.NewEtcd(buildstate.EtcdConfig{Client: cli, Runner: "api-b", RunnerTTL: 2 * time.Second})
	defer a.Close()
	defer b.Close()

	if err := a.Create(ctx, "b1", buildstate.Record{TemplateID: "tpl", Tags: []string{"default"}, CPU: 2, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	r, err := b.Get(ctx, "b1")
	if err != nil || r.TemplateID != "tpl" || r.CPU != 2 || r.Status != e2bapi.TemplateBuildStatusWaiting {
		t.Fatalf("the record through the other store: %+v %v", r, err)
	}
	if _, err := b.Get(ctx, "nope"); !errdefs.Is(err, api.CodeNotFound) {
		t.Errorf("unknown build: %v, want not_found", err)
	}

	t.Run("files in etcd, in chunks", func(t *testing.T) {
		data := make([]byte, 1<<20+12345)
		_, _ = rand.Read(data)
		if err := a.PutFiles(ctx, "h1", bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
		if ok, err := b.HasFiles(ctx, "h1"); !ok || err != nil {
			t.Fatalf("HasFiles through the other store: %v %v", ok, err)
		}
		if ok, _ := b.HasFiles(ctx, "h2"); ok {
			t.Error("files never uploaded are present")
		}
		rc, err := b.OpenFiles(ctx, "h1")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, data) {
			t.Errorf("read %d bytes, not the %d uploaded", len(got), len(data))
		}
		if err := a.PutFiles(ctx, "big", bytes.NewReader(nil), buildstate.MaxEtcdFiles+1); !errdefs.Is(err, api.CodeResourceExhausted) {
			t.Errorf("an upload over the etcd limit: %v, want resource_exhausted", err)
		}
	})

	t.Run("files in the blob store", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "blobs")
		bs, err := blob.Open("dir:"+dir, true)
		if err != nil {
			t.Fatal(err)
		}
		a := buildstate.NewEtcd(buildstate.EtcdConfig{Client: cli, Blobs: bs, Runner: "api-a"})
		b := buildstate.NewEtcd(buildstate.EtcdConfig{Client: cli, Blobs: bs, Runner: "api-b"})
		data := []byte(strings.Repeat("blob-store files ", 1000))
		if err := a.PutFiles(ctx, "hb", bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
		rc, err := b.OpenFiles(ctx, "hb")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, data) {
			t.Errorf("read %q", got)
		}
		if list, _ := bs.List(ctx); len(list) != 1 {
			t.Errorf("blob store holds %v, want the upload's one blob", list)
		}
	})

	// b runs the build.
	if err := b.Start(ctx, "b1"); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx, "b1"); !errdefs.Is(err, api.CodeConflict) {
		t.Errorf("a second start: %v, want conflict", err)
	}
	var many []e2bapi.BuildLogEntry
	for i := range 150 {
		many = append(many, entry(fmt.Sprintf("line %d", i)))
	}
	if err := b.Log(ctx, "b1", many...); err != nil {
		t.Fatal(err)
	}
	if err := b.Log(ctx, "b1", entry("line 150")); err != nil {
		t.Fatal(err)
	}
	logs, err := a.Logs(ctx, "b1", 0)
	if err != nil || len(logs) != 151 {
		t.Fatalf("logs through the other store: %d %v", len(logs), err)
	}
	for i, e := range logs {
		if e.Message != fmt.Sprintf("line %d", i) {
			t.Fatalf("entry %d is %q", i, e.Message)
		}
	}
	if logs, _ := a.Logs(ctx, "b1", 148); len(logs) != 3 || logs[0].Message != "line 148" {
		t.Errorf("logs from offset 148: %+v", logs)
	}
	if r, _ := a.Get(ctx, "b1"); r.Status != e2bapi.TemplateBuildStatusBuilding || r.Runner != "api-b" {
		t.Errorf("a running build read through the other store: %+v", r)
	}

	// The runner's process dies: its lease is gone (Close revokes it, as
	// the TTL's end does for a killed one).
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	r, err = a.Get(ctx, "b1")
	if err != nil || r.Status != e2bapi.TemplateBuildStatusError || r.Reason == nil ||
		!strings.Contains(r.Reason.Message, "api-b") || !strings.Contains(r.Reason.Message, "stopped before the build ended") || r.Ended.IsZero() {
		t.Fatalf("an orphaned build: %+v %v", r, err)
	}
	logs, _ = a.Logs(ctx, "b1", 151)
	if len(logs) != 1 || logs[0].Level != e2bapi.LogLevelError {
		t.Errorf("the orphan's last log entries: %+v", logs)
	}
	if err := b.Finish(ctx, "b1", e2bapi.TemplateBuildStatusReady, nil); !errdefs.Is(err, api.CodeConflict) {
		t.Errorf("finishing an orphaned build: %v, want conflict", err)
	}
	if r, _ := b.Get(ctx, "b1"); r.Status != e2bapi.TemplateBuildStatusError {
		t.Errorf("the orphan's status after its runner's late finish: %s", r.Status)
	}

	t.Run("a build that ends is not an orphan", func(t *testing.T) {
		c := buildstate.NewEtcd(buildstate.EtcdConfig{Client: cli, Runner: "api-c"})
		if err := a.Create(ctx, "b2", buildstate.Record{TemplateID: "tpl"}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx, "b2"); err != nil {
			t.Fatal(err)
		}
		if err := c.Finish(ctx, "b2", e2bapi.TemplateBuildStatusReady, nil); err != nil {
			t.Fatal(err)
		}
		c.Close()
		if r, _ := a.Get(ctx, "b2"); r.Status != e2bapi.TemplateBuildStatusReady {
			t.Errorf("a finished build read after its runner stopped: %s", r.Status)
		}
	})
}

// TestLogCap: a log keeps MaxLogEntries entries and one saying the rest were
// dropped, in both stores.
func TestLogCap(t *testing.T) {
	ctx := context.Background()
	for name, s := range map[string]buildstate.Store{"memory": buildstate.NewMemory(),
		"etcd": buildstate.NewEtcd(buildstate.EtcdConfig{Client: testEtcd(t), Runner: "x"})} {
		t.Run(name, func(t *testing.T) {
			defer s.Close()
			if err := s.Create(ctx, "b", buildstate.Record{TemplateID: "t"}); err != nil {
				t.Fatal(err)
			}
			batch := make([]e2bapi.BuildLogEntry, 1000)
			for i := range batch {
				batch[i] = entry("x")
			}
			for range buildstate.MaxLogEntries/len(batch) + 2 {
				if err := s.Log(ctx, "b", batch...); err != nil {
					t.Fatal(err)
				}
			}
			logs, err := s.Logs(ctx, "b", 0)
			if err != nil || len(logs) != buildstate.MaxLogEntries+1 {
				t.Fatalf("%d entries (%v), want %d", len(logs), err, buildstate.MaxLogEntries+1)
			}
			if last := logs[len(logs)-1]; last.Level != e2bapi.LogLevelWarn || !strings.Contains(last.Message, "dropped") {
				t.Errorf("last entry %+v", last)
			}
		})
	}
}

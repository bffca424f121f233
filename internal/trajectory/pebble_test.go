package trajectory

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// FuzzPebbleStepKey: step keys round-trip, sort by step, and parseStepKey
// accepts nothing else under a trajectory's prefix (nor another's keys).
func FuzzPebbleStepKey(f *testing.F) {
	f.Add("t1", uint32(1), byte('r'), []byte("s t1\x00\x00\x00\x00\x01r"))
	f.Add("a:b.c-d_e", uint32(MaxStep), byte('o'), []byte{})
	f.Add("x", uint32(0), byte('z'), []byte("sx\x00\x00\x00\x01\x00i"))
	f.Fuzz(func(t *testing.T, id string, n uint32, kind byte, junk []byte) {
		prefix := stepsPrefix(id)
		if gn, gk, ok := parseStepKey(prefix, junk); ok {
			if !bytes.Equal(pebbleStepKey(id, gn, gk), junk) {
				t.Fatalf("parsed %q as %d %c", junk, gn, gk)
			}
		}
		if ValidateID(id) != nil {
			return
		}
		valid := n >= 1 && n <= MaxStep && (kind == kindInput || kind == kindOutput || kind == kindRecord)
		k := pebbleStepKey(id, int(n), kind)
		gn, gk, ok := parseStepKey(prefix, k)
		if ok != valid || ok && (gn != int(n) || gk != kind) {
			t.Fatalf("%q %d %c: parsed %d %c %v", id, n, kind, gn, gk, ok)
		}
		if !bytes.HasPrefix(k, prefix) || bytes.Compare(k, prefixEnd(prefix)) >= 0 || bytes.HasPrefix(k, metaKey(id)) {
			t.Fatalf("key %q outside its range", k)
		}
		if other := id + "x"; valid {
			if _, _, ok := parseStepKey(stepsPrefix(other), k); ok {
				t.Fatalf("key of %q parsed under %q", id, other)
			}
			if n < MaxStep && bytes.Compare(k, pebbleStepKey(id, int(n)+1, kindInput)) >= 0 {
				t.Fatalf("step %d does not sort before %d", n, n+1)
			}
		}
	})
}

// FuzzDecodeRecords: the stored records decode without panicking, and what
// decodes re-encodes to an equal record.
func FuzzDecodeRecords(f *testing.F) {
	now := time.Unix(1700000000, 0).UTC()
	s := startedStep(BeginRequest{Trajectory: "t", N: 3, Op: OpExec, Fingerprint: "sha256:ab",
		Args: json.RawMessage(`{"cmd":["x"]}`), SandboxID: "sb", Now: now}, "boot")
	finishStep(s, Result{Status: 200, Header: map[string]string{"A": "b"}, BodySize: 3}, now)
	sj, _ := json.Marshal(s)
	mj, _ := json.Marshal(newMeta(BeginRequest{Trajectory: "t", SandboxID: "sb", Now: now}))
	f.Add(sj)
	f.Add(mj)
	f.Add([]byte(`{"step":"x"}`))
	f.Add([]byte(`{"result":null,"finished_at":"bad"}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		if st, err := decodeStep(v, 1); err == nil {
			again, _ := json.Marshal(st)
			st2, err := decodeStep(again, 1)
			if err != nil || !reflect.DeepEqual(normStep(st), normStep(st2)) {
				t.Fatalf("step does not round-trip: %s -> %s (%v)", v, again, err)
			}
		}
		if m, err := decodeMeta(v); err == nil {
			again, _ := json.Marshal(m)
			m2, err := decodeMeta(again)
			if err != nil || !reflect.DeepEqual(normMeta(m), normMeta(m2)) {
				t.Fatalf("meta does not round-trip: %s -> %s (%v)", v, again, err)
			}
		}
	})
}

// normStep / normMeta compare records up to time zones and monotonic readings.
func normStep(s *Step) string { b, _ := json.Marshal(s); return string(b) }
func normMeta(m *Meta) string { b, _ := json.Marshal(m); return string(b) }

func TestOpenNodeMigratesBolt(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	old := filepath.Join(dir, BoltFile)
	b, err := OpenBolt(old)
	if err != nil {
		t.Fatal(err)
	}
	req := func(id string, n int) BeginRequest {
		return BeginRequest{Trajectory: id, N: n, Op: OpWriteFile, Fingerprint: id + "-" + string(rune('0'+n)),
			Args: json.RawMessage(`{"path":"/f"}`), Input: []byte("in"), InputStored: true, SandboxID: "sb",
			Create: api.CreateSandboxRequest{Image: "img"}}
	}
	for _, id := range []string{"m1", "m2"} {
		for n := 1; n <= 3; n++ {
			if _, err := b.Begin(ctx, req(id, n)); err != nil {
				t.Fatal(err)
			}
			if n < 3 { // step 3 is left running
				res := Result{Status: 200, Body: []byte("out " + id), BodySize: 6}
				if n == 2 {
					res = Result{Status: 200, BodySize: 99 << 20, BodySHA256: "abc", Truncated: true}
				}
				if err := b.Finish(ctx, id, n, res, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := b.Rebind(ctx, "m2", "sb2", time.Now()); err != nil {
		t.Fatal(err)
	}
	b.Close()
	b, _ = OpenBolt(old) // a later boot: step 3 is unknown
	wantMeta, _ := b.List(ctx)
	var wantSteps [][]Step
	for _, m := range wantMeta {
		_, st, _ := b.Get(ctx, m.ID)
		wantSteps = append(wantSteps, st)
	}
	b.Close()

	if _, err := OpenNode(ctx, dir, "sqlite", nil); err == nil {
		t.Fatal("an unknown store kind should fail")
	}
	s, err := OpenNode(ctx, dir, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("the bbolt file should be renamed: %v", err)
	}
	if _, err := os.Stat(old + ".migrated"); err != nil {
		t.Fatal(err)
	}
	gotMeta, err := s.List(ctx)
	if err != nil || !reflect.DeepEqual(jsonOf(gotMeta), jsonOf(wantMeta)) {
		t.Fatalf("metas: %s\nwant %s (%v)", jsonOf(gotMeta), jsonOf(wantMeta), err)
	}
	for i, m := range wantMeta {
		_, st, err := s.Get(ctx, m.ID)
		if err != nil || !reflect.DeepEqual(st, wantSteps[i]) {
			t.Fatalf("%s steps: %+v\nwant %+v (%v)", m.ID, st, wantSteps[i], err)
		}
		if st[0].Result == nil || string(st[0].Result.Body) != "out "+m.ID || string(st[0].Input) != "in" || st[2].State != api.StepUnknown {
			t.Fatalf("%s: bodies or states lost: %+v", m.ID, st)
		}
	}
	if d, err := s.Begin(ctx, req("m1", 1)); err != nil || d.Replay == nil || string(d.Replay.Result.Body) != "out m1" {
		t.Fatalf("replay after migration: %+v %v", d, err)
	}
	if _, err := s.Begin(ctx, req("m1", 3)); errdefs.CodeOf(err) != api.CodeOutcomeUnknown {
		t.Fatalf("step running at migration: %v", err)
	}
	if _, err := s.Begin(ctx, req("m1", 4)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Opening again does not migrate again, and bolt can still be chosen.
	if s, err = OpenNode(ctx, dir, KindPebble, nil); err != nil {
		t.Fatal(err)
	}
	if m, _, err := s.Get(ctx, "m1"); err != nil || m.Count != 4 {
		t.Fatalf("after reopen: %+v %v", m, err)
	}
	s.Close()
	bs, err := OpenNode(ctx, dir, KindBolt, nil)
	if err != nil {
		t.Fatal(err)
	}
	bs.Close()
}

func jsonOf(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestPebbleLargeBodies: bodies up to MaxBodyLog make batches larger than the
// memtable (Pebble writes them as flushable batches).
func TestPebbleLargeBodies(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "log")
	p, err := OpenPebble(dir, PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in := bytes.Repeat([]byte("i"), 8<<20)
	out := bytes.Repeat([]byte("o"), MaxBodyLog)
	if _, err := p.Begin(ctx, BeginRequest{Trajectory: "big", N: 1, Op: OpWriteFile, Fingerprint: "f",
		Input: in, InputStored: true, SandboxID: "sb"}); err != nil {
		t.Fatal(err)
	}
	if err := p.Finish(ctx, "big", 1, Result{Status: 200, Body: out, BodySize: int64(len(out))}, time.Now()); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if p, err = OpenPebble(dir, PebbleOptions{}); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, steps, err := p.Get(ctx, "big")
	if err != nil || len(steps) != 1 || !bytes.Equal(steps[0].Input, in) || !bytes.Equal(steps[0].Result.Body, out) {
		t.Fatalf("large bodies: %v", err)
	}
}

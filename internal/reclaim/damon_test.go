package reclaim_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/dsec-dev/dsec/internal/reclaim"
	"github.com/dsec-dev/dsec/internal/reclaim/damontest"
)

func TestDAMONOwnsItsKdamond(t *testing.T) {
	f := damontest.New(t, 0)
	state := filepath.Join(t.TempDir(), "damon.json")
	d, err := reclaim.OpenDAMON(f.Root, f, state, reclaim.DefaultDAMONScheme())
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Get(t, "kdamonds/nr_kdamonds"); got != "1" {
		t.Fatalf("nr_kdamonds %s", got)
	}
	if err := d.Apply([]int{300, 100, 200, 100}); err != nil {
		t.Fatal(err)
	}
	c := "kdamonds/0/contexts/0/"
	for rel, want := range map[string]string{
		"kdamonds/0/state": "on", "kdamonds/0/pid": "4242",
		c + "operations": "vaddr", c + "targets/nr_targets": "3",
		c + "targets/0/pid_target": "100", c + "targets/2/pid_target": "300",
		c + "schemes/0/action": "pageout", c + "schemes/0/access_pattern/nr_accesses/max": "0",
		c + "schemes/0/access_pattern/age/min": "100", c + "schemes/0/quotas/bytes": strconv.Itoa(64 << 20),
		c + "monitoring_attrs/intervals/aggr_us": "100000",
	} {
		if got := f.Get(t, rel); got != want {
			t.Errorf("%s = %q, want %q", rel, got, want)
		}
	}
	// The same set again changes nothing; a new set restarts with it.
	n := len(f.Writes)
	if err := d.Apply([]int{100, 200, 300}); err != nil || len(f.Writes) != n {
		t.Errorf("re-apply of the same pids wrote %v (%v)", f.Writes[n:], err)
	}
	if err := d.Apply([]int{7}); err != nil {
		t.Fatal(err)
	}
	if got := f.Get(t, c+"targets/nr_targets"); got != "1" || f.Get(t, c+"targets/0/pid_target") != "7" {
		t.Errorf("targets after change: %s", got)
	}
	if err := d.Apply(nil); err != nil || f.Get(t, "kdamonds/0/state") != "off" {
		t.Errorf("apply of no pids: state %s (%v)", f.Get(t, "kdamonds/0/state"), err)
	}
	// A restarted dsec recognises its own kdamond from the record.
	if err := d.Apply([]int{9}); err != nil {
		t.Fatal(err)
	}
	d2, err := reclaim.OpenDAMON(f.Root, f, state, reclaim.DefaultDAMONScheme())
	if err != nil {
		t.Fatalf("reopen own kdamond: %v", err)
	}
	if f.Get(t, "kdamonds/0/state") != "off" {
		t.Error("reopen did not stop the old run")
	}
	if err := d2.Close(); err != nil {
		t.Fatal(err)
	}
	if got := f.Get(t, "kdamonds/nr_kdamonds"); got != "0" {
		t.Errorf("after Close nr_kdamonds %s", got)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("ownership record left: %v", err)
	}
}

func TestDAMONRefusesForeignKdamonds(t *testing.T) {
	f := damontest.New(t, 1)
	if err := f.Write(filepath.Join(f.Root, "kdamonds/0/state"), "on"); err != nil {
		t.Fatal(err)
	}
	f.Writes = nil
	_, err := reclaim.OpenDAMON(f.Root, f, filepath.Join(t.TempDir(), "damon.json"), reclaim.DefaultDAMONScheme())
	if !errors.Is(err, reclaim.ErrDAMONNotOurs) {
		t.Fatalf("foreign kdamond: %v", err)
	}
	if len(f.Writes) != 0 {
		t.Errorf("wrote to a DAMON tree it does not own: %v", f.Writes)
	}
	if f.Get(t, "kdamonds/0/state") != "on" || f.Get(t, "kdamonds/nr_kdamonds") != "1" {
		t.Error("the foreign kdamond was disturbed")
	}
	// A record naming another root (or a different count) does not make it ours.
	state := filepath.Join(t.TempDir(), "damon.json")
	if err := os.WriteFile(state, []byte(`{"root":"/elsewhere","index":0}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := reclaim.OpenDAMON(f.Root, f, state, reclaim.DefaultDAMONScheme()); !errors.Is(err, reclaim.ErrDAMONNotOurs) || len(f.Writes) != 0 {
		t.Errorf("record of another root: %v, writes %v", err, f.Writes)
	}
	if err := os.WriteFile(state, []byte(`{"root":"`+f.Root+`","index":3}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := reclaim.OpenDAMON(f.Root, f, state, reclaim.DefaultDAMONScheme()); !errors.Is(err, reclaim.ErrDAMONNotOurs) || len(f.Writes) != 0 {
		t.Errorf("record of a kdamond that is not there: %v, writes %v", err, f.Writes)
	}
}

func TestDAMONMissing(t *testing.T) {
	if _, err := reclaim.OpenDAMON(filepath.Join(t.TempDir(), "none"), nil, filepath.Join(t.TempDir(), "s"), reclaim.DefaultDAMONScheme()); err == nil {
		t.Fatal("no DAMON tree: no error")
	}
}

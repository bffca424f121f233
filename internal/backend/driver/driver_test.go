package driver_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestSpecReadsOldRecords: an agent record written before layers were
// descriptions has "Lower" (top-most first); it reads back as dir layers, base
// first, and a new record round-trips.
func TestSpecReadsOldRecords(t *testing.T) {
	var s driver.Spec
	old := `{"ID":"sb-1","Image":"debian","Lower":["/img/top","/img/base"],"CPU":1,"Memory":5,"Disk":6,"PidsMax":7,"Env":["A=1"],"Hostname":"h"}`
	if err := json.Unmarshal([]byte(old), &s); err != nil {
		t.Fatal(err)
	}
	want := driver.Spec{ID: "sb-1", Image: "debian", CPU: 1, Memory: 5, Disk: 6, PidsMax: 7, Env: []string{"A=1"}, Hostname: "h",
		Layers: []driver.Layer{{Kind: driver.LayerDir, Path: "/img/base"}, {Kind: driver.LayerDir, Path: "/img/top"}}}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("old record read as %+v, want %+v", s, want)
	}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var back driver.Spec
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, want) {
		t.Fatalf("round trip: %+v, %v (%s)", back, err, b)
	}
	if err := json.Unmarshal([]byte(`{"ID":`), &back); err == nil {
		t.Error("a truncated record parsed")
	}
}

type named struct {
	driver.Driver
	name string
}

func (n named) Name() string { return n.name }

func (n named) Start(context.Context, driver.Spec) (driver.Instance, error) { return nil, nil }

func TestRegistry(t *testing.T) {
	r, err := driver.NewRegistry(named{name: "container"}, named{name: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Default() != "container" || !reflect.DeepEqual(r.Names(), []string{"container", "mock"}) {
		t.Errorf("default %q names %v", r.Default(), r.Names())
	}
	for _, b := range []string{"", "container", "mock"} {
		if d, err := r.Get(b); err != nil || (b != "" && d.Name() != b) {
			t.Errorf("Get(%q) = %v, %v", b, d, err)
		}
	}
	if _, err := r.Get("microvm"); !errdefs.Is(err, api.CodeInvalidArgument) {
		t.Errorf("Get(unknown) = %v, want invalid_argument", err)
	}
	if _, err := driver.NewRegistry(named{name: "a"}, named{name: "a"}); err == nil {
		t.Error("two drivers with one name registered")
	}
	if _, err := driver.NewRegistry(); err == nil {
		t.Error("an empty registry")
	}
}

package container

import (
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestIDAlloc: ranges are disjoint, a recovered sandbox's range is not
// handed out again, a full pool is resource_exhausted, freed ranges return.
func TestIDAlloc(t *testing.T) {
	a, err := newIDAlloc(IDPool{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	a.mark(1<<20+65536, "recovered")
	m1, err := a.alloc("a")
	if err != nil || m1.HostID != 1<<20 || m1.Size != 65536 {
		t.Fatalf("first range %+v %v", m1, err)
	}
	m2, err := a.alloc("b")
	if err != nil || m2.HostID != 1<<20+2*65536 {
		t.Fatalf("second range %+v %v, want the one after the recovered sandbox's", m2, err)
	}
	if _, err := a.alloc("c"); !errdefs.Is(err, api.CodeResourceExhausted) {
		t.Fatalf("full pool: %v", err)
	}
	a.free(m1.HostID, "someone else") // not its range: kept
	if _, err := a.alloc("c"); err == nil {
		t.Fatal("a range was freed by a sandbox that does not hold it")
	}
	a.free(m1.HostID, "a")
	if m, err := a.alloc("c"); err != nil || m.HostID != m1.HostID {
		t.Fatalf("after free: %+v %v", m, err)
	}
	if _, err := newIDAlloc(IDPool{Base: 1 << 31, Step: 1 << 16, Count: 1 << 16}); err == nil {
		t.Fatal("a pool beyond 32 bits was accepted")
	}
}

package lazy

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/blob"
)

// TestThrottle: reads through a throttled store take at least bytes/rate (less the
// burst credit), shared across readers; an idle link does not bank credit beyond
// the burst.
func TestThrottle(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenStore("dir:" + dir + ";rate=10000000") // 10 MB/s
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("x"), 2<<20)
	dg := blob.FromBytes(data)
	base, _ := blob.NewDir(dir)
	if err := base.Put(context.Background(), dg, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	read := func() time.Duration {
		t0 := time.Now()
		buf := make([]byte, 64<<10)
		for off := int64(0); off < int64(len(data)); off += int64(len(buf)) {
			if _, err := st.ReadAt(context.Background(), dg, buf, off); err != nil {
				t.Fatal(err)
			}
		}
		return time.Since(t0)
	}
	want := time.Duration(float64(len(data))/10e6*float64(time.Second)) - throttleBurst
	if el := read(); el < want {
		t.Fatalf("2 MiB at 10 MB/s took %v, want at least %v", el, want)
	}
	time.Sleep(300 * time.Millisecond) // idle: no credit beyond the burst
	if el := read(); el < want {
		t.Fatalf("after idling, 2 MiB took %v, want at least %v", el, want)
	}
	if _, err := OpenStore("dir:" + dir + ";rate=0"); err == nil {
		t.Fatal("rate=0 accepted")
	}
	// Latency: each read waits a round trip; concurrent reads wait theirs at once.
	slow, err := OpenStore("dir:" + dir + ";latency=100ms")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	done := make(chan struct{})
	for range 4 {
		go func() {
			_, _ = slow.ReadAt(context.Background(), dg, make([]byte, 10), 0)
			done <- struct{}{}
		}()
	}
	for range 4 {
		<-done
	}
	// One round trip, not four in series (400 ms); the slack is for a busy machine.
	if el := time.Since(t0); el < 100*time.Millisecond || el >= 300*time.Millisecond {
		t.Fatalf("4 concurrent reads 100 ms away took %v, want one round trip", el)
	}
	if _, err := OpenStore("dir:" + dir + ";latency=x"); err == nil {
		t.Fatal("bad latency accepted")
	}
	if _, err := OpenStore("dir:" + dir + ";speed=1"); err == nil {
		t.Fatal("unknown option accepted")
	}
}

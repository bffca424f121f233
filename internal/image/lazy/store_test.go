package lazy

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/image/blob"
)

// TestThrottle: reads through a throttled store take bytes/rate (at least, less
// the burst credit; at most half again), shared across readers; an idle link
// does not bank credit beyond the burst.
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
	ideal := time.Duration(float64(len(data)) / 10e6 * float64(time.Second))
	want := ideal - throttleBurst
	fastest := time.Hour
	for i := range 3 {
		if i > 0 {
			time.Sleep(300 * time.Millisecond) // idle: no credit beyond the burst
		}
		el := read()
		if el < want {
			t.Fatalf("read %d: 2 MiB at 10 MB/s took %v, want at least %v", i, el, want)
		}
		fastest = min(fastest, el)
	}
	// The fastest of three within half again the link's time: a throttle that
	// overcharges (each read twice, a timer's rounding per read, sleeping past
	// the deadline) is slower every time; a busy machine only now and then.
	if limit := ideal * 3 / 2; fastest > limit {
		t.Fatalf("2 MiB at 10 MB/s took at best %v, want at most %v", fastest, limit)
	}
	t.Logf("2 MiB at 10 MB/s: ideal %v, fastest of 3 %v", ideal, fastest)
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

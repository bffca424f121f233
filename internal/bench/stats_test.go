package bench

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	l := summarize(ds)
	if l.Minms != 1 || l.P50ms != 50 || l.P99ms != 99 || l.Maxms != 100 {
		t.Fatalf("got %+v", l)
	}
	if summarize(nil) != (Latencies{}) {
		t.Fatal("empty")
	}
}

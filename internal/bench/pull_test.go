package bench

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestPullOptionsNormalize(t *testing.T) {
	o := PullOptions{ImageBytes: 1 << 30, Compare: []string{"podman"}}
	if err := o.normalize(); err != nil {
		t.Fatal(err)
	}
	if o.Layers != 4 || o.LayerBytes != 256<<20 || o.Rounds != 3 || o.Parallel != 20 || o.N != 10 {
		t.Fatalf("1 GiB image: layers %d of %d, rounds %d, parallel %d, n %d", o.Layers, o.LayerBytes, o.Rounds, o.Parallel, o.N)
	}
	o = PullOptions{ImageBytes: 4 << 30}
	if err := o.normalize(); err != nil || o.Layers != 16 || o.LayerBytes != 256<<20 {
		t.Fatalf("4 GiB image: layers %d of %d (%v)", o.Layers, o.LayerBytes, err)
	}
	o = PullOptions{ImageBytes: 1 << 30, Layers: 2}
	if err := o.normalize(); err != nil || o.LayerBytes != 512<<20 {
		t.Fatalf("2 layers: %d each (%v)", o.LayerBytes, err)
	}
	o = PullOptions{Burst: 40}
	if err := o.normalize(); err != nil || o.BurstImages != 8 || o.BurstImageBytes != 200<<20 || o.Parallel != 8 {
		t.Fatalf("burst defaults: %+v (%v)", o, err)
	}
	for _, bad := range []PullOptions{
		{Compare: []string{"docker"}},
		{PodmanDriver: "btrfs"},
		{ImageBytes: 1 << 30, Layers: -1},
		{Burst: -1},
	} {
		if err := bad.normalize(); !errdefs.Is(err, api.CodeInvalidArgument) {
			t.Errorf("%+v: got %v, want invalid_argument", bad, err)
		}
	}
}

// Every key of the result is snake_case, as in the other benches' JSON, and
// the comparison's figures are where a reader looks for them.
func TestPullResultJSON(t *testing.T) {
	r := PullResult{Ref: "127.0.0.1:5000/bench/pull:latest", Layers: 5, ContentBytes: 1 << 30,
		Cold: Latencies{P50ms: 900}, Stored: Latencies{P50ms: 300},
		Peers:     map[string]*PullPeer{"podman": {Cold: Latencies{P50ms: 3000}, StorageDriver: "overlay", Work: "podman run"}},
		RatiosP50: map[string]float64{"dsec-cold/podman": 0.3},
		Burst: &BurstPullResult{Sandboxes: 40, Images: 8, Sides: map[string]*BurstSide{
			"dsec":   {AllAnsweredS: 10, DiskBytes: 1, BlobStoreBytes: 1, FractionRead: 0.04, PerImageFractionRead: []float64{0.04}},
			"podman": {AllAnsweredS: 20, PullS: 15, DiskBytes: 2, StorageDriver: "overlay"}}}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	snake := regexp.MustCompile(`^[a-z0-9_]+$`)
	named := map[string]bool{"ratios_p50": true, "ratios_all_answered": true, "ratios_disk_bytes": true,
		"sides": true, "peers": true, "skipped": true, "fetches_per_layer": true}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				// Keys of maps by peer, side, layer or ratio are names.
				if !snake.MatchString(k) && !named[lastKey(path)] {
					t.Errorf("%s.%s: not snake_case", path, k)
				}
				walk(path+"."+k, x)
			}
		case []any:
			for _, x := range v {
				walk(path, x)
			}
		}
	}
	walk("", m)
	get := func(keys ...string) any {
		var v any = m
		for _, k := range keys {
			mm, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = mm[k]
		}
		return v
	}
	for _, c := range []struct {
		keys []string
		want any
	}{
		{[]string{"cold", "p50_ms"}, 900.0},
		{[]string{"stored", "p50_ms"}, 300.0},
		{[]string{"peers", "podman", "cold", "p50_ms"}, 3000.0},
		{[]string{"peers", "podman", "storage_driver"}, "overlay"},
		{[]string{"ratios_p50", "dsec-cold/podman"}, 0.3},
		{[]string{"burst", "sides", "dsec", "all_answered_s"}, 10.0},
		{[]string{"burst", "sides", "dsec", "fraction_read"}, 0.04},
		{[]string{"burst", "sides", "podman", "pull_s"}, 15.0},
		{[]string{"burst", "sides", "podman", "disk_bytes"}, 2.0},
	} {
		if got := get(c.keys...); got != c.want {
			t.Errorf("%v = %v, want %v", c.keys, got, c.want)
		}
	}
}

func lastKey(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '.' {
			return path[i+1:]
		}
	}
	return path
}

// A generated layer holds files of the size asked for, the same content on
// every read, and compresses to about half.
func TestGenLayer(t *testing.T) {
	const n = 3<<20 + 1000
	l, err := genLayer(7, "bench/x", n)
	if err != nil {
		t.Fatal(err)
	}
	read := func() (int64, int) {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		tr := tar.NewReader(rc)
		var total int64
		files := 0
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				return total, files
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				files++
				total += h.Size
			}
		}
	}
	if total, files := read(); total != n || files != 4 {
		t.Fatalf("%d bytes in %d files, want %d in 4", total, files, n)
	}
	d1, _ := l.Digest()
	l2, _ := genLayer(7, "bench/x", n)
	if d2, _ := l2.Digest(); d1 != d2 {
		t.Fatalf("digests differ: %s %s", d1, d2)
	}
	sz, _ := l.Size()
	if ratio := float64(sz) / n; ratio < 0.4 || ratio > 0.65 {
		t.Fatalf("compressed to %.2f of its size, want about half", ratio)
	}
}

// The in-memory claims give a layer recorded by one node to the next, and
// let a second claimant wait for the first.
func TestMemClaims(t *testing.T) {
	ctx := context.Background()
	c := newMemClaims()
	have := func(image.Layer) bool { return true }
	el, done, err := c.Claim(ctx, "sha256:a", have)
	if err != nil || el != nil || done == nil {
		t.Fatalf("first claim: layer %v, done set %t, err %v", el, done != nil, err)
	}
	got := make(chan *image.Layer)
	go func() {
		el, _, _ := c.Claim(ctx, "sha256:a", have)
		got <- el
	}()
	if err := done(&image.Layer{Digest: "sha256:erofs"}); err != nil {
		t.Fatal(err)
	}
	if el := <-got; el == nil || el.Digest != "sha256:erofs" {
		t.Fatalf("second claimant got %v", el)
	}
	if el, done, _ := c.Claim(ctx, "sha256:a", func(image.Layer) bool { return false }); el != nil || done == nil {
		t.Fatal("a layer whose blob is gone must be claimed again")
	}
}

// diskUsage counts allocated blocks: a sparse file counts what it holds.
func TestDiskUsage(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := diskUsage(dir); got < 1<<20 || got > 2<<20 {
		t.Fatalf("diskUsage = %d, want about 1 MiB", got)
	}
}

package trajectory

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Damaged bbolt files (a power loss under the unsynced commits of earlier
// builds, a truncation, flipped bits): OpenBolt refuses each with an error
// naming the file and what to do, never panics or faults, and leaves the file
// as it was. The same files opened without the check (boltOptions.noCheck) in a
// child process crash it: the check is what keeps the node up.

const (
	bdChildEnv = "DSEC_BOLTDAMAGE_UNCHECKED"
	bdTrajs    = 24
	bdSteps    = 12
	bdPage     = 4096
)

// bdFixture writes a log of bdTrajs trajectories of bdSteps steps (bodies up
// to 40 KiB: overflow pages, branch pages, nested buckets) and returns its bytes.
// freelist: the file also carries a synced freelist page (as one written by
// bbolt without NoFreelistSync).
func bdFixture(t *testing.T, freelist bool) []byte {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), BoltFile)
	b, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range bdTrajs {
		for n := 1; n <= bdSteps; n++ {
			if err := plStart(ctx, b, plTraj(i), n); err != nil {
				t.Fatal(err)
			}
			if err := plEnd(ctx, b, plTraj(i), n); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if freelist {
		// bbolt writes the freelist when a file is opened read-write
		// without NoFreelistSync; a write frees pages into it.
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketT).DeleteBucket([]byte(plTraj(0))) }); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	img, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// bdMetaField is the offset of a meta field in page 0 (page header, then magic,
// version, pageSize, flags, root, sequence, freelist, pgid, txid, checksum).
func bdMetaField(page, field int) int { return page*bdPage + bcPageHeader + field }

// bdPages lists the pages of img reachable from its current meta, by flags.
func bdPages(t *testing.T, img []byte) map[uint16][]uint64 {
	t.Helper()
	path := filepath.Join(t.TempDir(), "walk.db")
	if err := os.WriteFile(path, img, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pages := map[uint16][]uint64{}
	if _, err := walkBolt(f, path, func(id uint64, flags uint16) { pages[flags] = append(pages[flags], id) }); err != nil {
		t.Fatalf("the fixture fails the check: %v", err)
	}
	return pages
}

type bdCase struct {
	name   string
	damage func(t *testing.T, img []byte) []byte
	// unchecked is what opening it without the check does: "crashes" (a
	// panic or fault kills the process), "refused" (bbolt returns an error)
	// or "opens" (bbolt reads it as a new, empty log: the log silently gone).
	unchecked string
}

func bdCases() []bdCase {
	le := binary.LittleEndian
	return []bdCase{
		{name: "truncated to 0", unchecked: "opens", damage: func(_ *testing.T, img []byte) []byte { return img[:0] }},
		{name: "truncated within the first page", unchecked: "refused", damage: func(_ *testing.T, img []byte) []byte { return img[:1000] }},
		{name: "truncated to half", unchecked: "crashes", damage: func(_ *testing.T, img []byte) []byte {
			return img[:len(img)/2/bdPage*bdPage]
		}},
		{name: "both meta pages zeroed", unchecked: "refused", damage: func(_ *testing.T, img []byte) []byte {
			clear(img[:2*bdPage])
			return img
		}},
		{name: "both meta pages' roots flipped", unchecked: "refused", damage: func(_ *testing.T, img []byte) []byte {
			img[bdMetaField(0, 16)] ^= 0x40
			img[bdMetaField(1, 16)] ^= 0x40
			return img
		}},
		{name: "a branch page's child pointer flipped", unchecked: "crashes", damage: func(t *testing.T, img []byte) []byte {
			branches := bdPages(t, img)[bcBranch]
			if len(branches) == 0 {
				t.Fatal("the fixture has no branch page")
			}
			// The first element's pgid (element: pos, ksize, pgid).
			img[int(branches[0])*bdPage+bcPageHeader+8+5] ^= 0x10
			return img
		}},
		{name: "a leaf element's position flipped", unchecked: "crashes", damage: func(t *testing.T, img []byte) []byte {
			leaves := bdPages(t, img)[bcLeaf]
			off := int(leaves[len(leaves)-1])*bdPage + bcPageHeader + 4 // element 0: flags, pos
			le.PutUint32(img[off:], le.Uint32(img[off:])^0x40000000)
			return img
		}},
		{name: "freelist count flipped", unchecked: "crashes", damage: func(t *testing.T, img []byte) []byte {
			fl := bdPages(t, img)[bcFreelist]
			if len(fl) != 1 {
				t.Fatalf("the fixture has freelist pages %v", fl)
			}
			off := int(fl[0])*bdPage + 10 // the page header's count
			le.PutUint16(img[off:], 0xFFFF)
			le.PutUint64(img[int(fl[0])*bdPage+bcPageHeader:], 1<<40)
			return img
		}},
	}
}

// TestBoltDamaged: each damaged file is refused with ErrBoltDamaged (an
// internal error naming the file and the way out), nothing panics, and the
// file's bytes are the same after; a healthy log beside it opens.
func TestBoltDamaged(t *testing.T) {
	plain, withFreelist := bdFixture(t, false), bdFixture(t, true)
	for _, c := range bdCases() {
		t.Run(c.name, func(t *testing.T) {
			src := plain
			if strings.HasPrefix(c.name, "freelist") {
				src = withFreelist
			}
			path := filepath.Join(t.TempDir(), BoltFile)
			if err := os.WriteFile(path, c.damage(t, bytes.Clone(src)), 0o600); err != nil {
				t.Fatal(err)
			}
			before := bdHash(t, path)
			b, err := OpenBolt(path)
			if err == nil {
				b.Close()
				t.Fatal("the damaged log opened")
			}
			if !errors.Is(err, ErrBoltDamaged) || !errdefs.Is(err, api.CodeInternal) {
				t.Errorf("not a damaged-log error: %v", err)
			}
			if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, "mv "+path) {
				t.Errorf("the error names neither the file nor what to do: %v", err)
			}
			if after := bdHash(t, path); after != before {
				t.Errorf("the refused file was changed")
			}
			t.Log(err)
		})
	}
	t.Run("healthy log beside a damaged one", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "damaged.db"), plain[:len(plain)/2], 0o600); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, BoltFile)
		if err := os.WriteFile(path, plain, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenBolt(filepath.Join(dir, "damaged.db")); !errors.Is(err, ErrBoltDamaged) {
			t.Fatalf("damaged: %v", err)
		}
		bdOpensWhole(t, path, false)
	})
	t.Run("one meta page zeroed", func(t *testing.T) {
		// A torn meta write is a crash bbolt is built for: it uses the
		// other meta page, of the previous commit (the fixture's last one
		// answered the last step of the last trajectory).
		txid := func(page int) uint64 { return binary.LittleEndian.Uint64(plain[bdMetaField(page, 48):]) }
		for page := range 2 {
			img := bytes.Clone(plain)
			clear(img[page*bdPage : (page+1)*bdPage])
			path := filepath.Join(t.TempDir(), BoltFile)
			if err := os.WriteFile(path, img, 0o600); err != nil {
				t.Fatal(err)
			}
			bdOpensWhole(t, path, txid(page) > txid(1-page))
		}
	})
}

// bdOpensWhole opens the log at path and checks that every step is there
// (but the fixture's last commit when lastLost).
func bdOpensWhole(t *testing.T, path string, lastLost bool) {
	t.Helper()
	b, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	acked := map[string]int{}
	var trajs []string
	for i := range bdTrajs {
		acked[plTraj(i)] = bdSteps
		trajs = append(trajs, plTraj(i))
	}
	if lastLost {
		acked[plTraj(bdTrajs-1)]--
	}
	if err := checkAnswers(context.Background(), b, trajs, acked); err != nil {
		t.Fatal(err)
	}
}

func bdHash(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// bdUncheckedChild opens the log at path without the check and reads and
// writes it: exit 0 when that worked, 3 when bbolt returned an error.
func bdUncheckedChild(path string) {
	ctx := context.Background()
	b, err := openBolt(path, boltOptions{noCheck: true})
	if err == nil {
		var metas []Meta
		if metas, err = b.List(ctx); err == nil {
			for _, m := range metas {
				if _, _, err = b.Get(ctx, m.ID); err != nil {
					break
				}
			}
		}
		if err == nil {
			err = plStart(ctx, b, "after", 1)
		}
		if cerr := b.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "refused:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// TestBoltDamagedUnchecked: the check is needed. Without it, the damaged
// files marked crashes kill the process that opens them (a panic in a
// goroutine of bbolt's own, a fault reading its mmap out of bounds, or an
// allocation of a damaged count), and an empty file is taken for a new log;
// each runs in a child process.
func TestBoltDamagedUnchecked(t *testing.T) {
	if path := os.Getenv(bdChildEnv); path != "" {
		bdUncheckedChild(path)
	}
	plain, withFreelist := bdFixture(t, false), bdFixture(t, true)
	for _, c := range bdCases() {
		t.Run(c.name, func(t *testing.T) {
			src := plain
			if strings.HasPrefix(c.name, "freelist") {
				src = withFreelist
			}
			path := filepath.Join(t.TempDir(), BoltFile)
			if err := os.WriteFile(path, c.damage(t, bytes.Clone(src)), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestBoltDamagedUnchecked$")
			cmd.Env = append(os.Environ(), bdChildEnv+"="+path)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			got := "opens"
			if errors.As(err, &ee) && ee.ExitCode() == 3 {
				got = "refused"
			} else if err != nil {
				got = "crashes"
			}
			t.Logf("without the check: %s: %v: %s", got, err, firstLines(out, 3))
			if got != c.unchecked {
				t.Errorf("without the check: %s, want %s", got, c.unchecked)
			}
			if got == "crashes" && !bytes.Contains(out, []byte("panic")) && !bytes.Contains(out, []byte("fatal error")) {
				t.Errorf("the child died other than by a panic or fault: %s", firstLines(out, 10))
			}
		})
	}
}

func firstLines(b []byte, n int) string {
	lines := strings.SplitN(string(b), "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], " | ")
}

// BenchmarkBoltOpen: opening a 224 MiB log (2000 trajectories of 50 records of
// 2 KB), with the check and without it.
func BenchmarkBoltOpen(b *testing.B) {
	path := filepath.Join(b.TempDir(), BoltFile)
	s, err := OpenBolt(path)
	if err != nil {
		b.Fatal(err)
	}
	s.Close()
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	val := make([]byte, 2000)
	for tr := range 2000 {
		if err := db.Update(func(tx *bolt.Tx) error {
			tb, err := tx.Bucket(bucketT).CreateBucket([]byte(plTraj(tr)))
			if err != nil {
				return err
			}
			for n := range 50 {
				if err := tb.Put(stepKey('o', n), val); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	if err := db.Sync(); err != nil {
		b.Fatal(err)
	}
	db.Close()
	for _, check := range []bool{true, false} {
		b.Run(fmt.Sprintf("check=%v", check), func(b *testing.B) {
			for range b.N {
				s, err := openBolt(path, boltOptions{noCheck: !check})
				if err != nil {
					b.Fatal(err)
				}
				s.Close()
			}
		})
	}
}

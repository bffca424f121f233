package trajectory

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	bolt "go.etcd.io/bbolt"

	"github.com/dsec-dev/dsec/internal/datafmt"
)

// TestStoreFormat: both stores mark their format at open; a store marked by a
// later dsec is refused (datafmt.ErrNewer) and its mark left as it is.
func TestStoreFormat(t *testing.T) {
	t.Run("pebble", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "traj")
		p, err := OpenPebble(dir, PebbleOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Close()
		db, err := pebble.Open(dir, &pebble.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if v, c, err := db.Get(formatKey); err != nil || string(v) != "1" {
			t.Fatalf("format key: %q %v", v, err)
		} else {
			c.Close()
		}
		if err := db.Set(formatKey, []byte("5"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		db.Close()
		if _, err := OpenPebble(dir, PebbleOptions{}); !errors.Is(err, datafmt.ErrNewer) {
			t.Fatalf("a later store: %v", err)
		}
		db, err = pebble.Open(dir, &pebble.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if v, c, err := db.Get(formatKey); err != nil || string(v) != "5" {
			t.Errorf("the refused store's format was rewritten: %q %v", v, err)
		} else {
			c.Close()
		}
	})
	t.Run("bolt", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "traj.db")
		b, err := OpenBolt(path)
		if err != nil {
			t.Fatal(err)
		}
		b.Close()
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketV).Put(bucketV, []byte("5")) }); err != nil {
			t.Fatal(err)
		}
		db.Close()
		if _, err := OpenBolt(path); !errors.Is(err, datafmt.ErrNewer) {
			t.Fatalf("a later store: %v", err)
		}
	})
}

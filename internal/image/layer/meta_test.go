package layer

import (
	"context"
	"crypto/rand"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"testing"

	erofs "github.com/erofs/go-erofs"

	"github.com/dsec-dev/dsec/internal/image/blob"
)

// TestMetaChunksMatchImage builds a layer and checks the metadata chunks its
// index records against the image, found independently: every inode (at
// meta_blkaddr + nid*32) and every directory entry (relink's direntOffset walk
// of the on-disk directory blocks) lies in a metadata chunk, and every chunk
// wholly inside a regular file's data is not one.
func TestMetaChunksMatchImage(t *testing.T) {
	src := t.TempDir()
	big := make([]byte, 300<<10)
	rand.Read(big)
	for d := 0; d < 40; d++ {
		dir := filepath.Join(src, fmt.Sprintf("d%02d", d), "sub")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f := 0; f < 30; f++ {
			content := []byte(fmt.Sprintf("small file %d/%d with a longish name", d, f))
			if f == 0 && d%8 == 0 {
				content = big[d:]
			}
			name := filepath.Join(dir, fmt.Sprintf("file-with-a-long-name-%03d.txt", f))
			if err := os.WriteFile(name, content, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("sub/file-with-a-long-name-000.txt", filepath.Join(src, fmt.Sprintf("d%02d", d), "link")); err != nil {
			t.Fatal(err)
		}
	}
	store, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var kept string
	const chunk = 4096
	res, err := Build(context.Background(), Source{Kind: "dir", Arg: src}, store,
		Options{TempDir: t.TempDir(), IndexChunk: chunk, Keep: func(p string) { kept = p }})
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(kept)
	ixb, err := blob.ReadSmall(context.Background(), store, res.Index, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := blob.ParseChunkIndex(ixb)
	if err != nil {
		t.Fatal(err)
	}
	if len(ix.Meta) == 0 || len(ix.Meta) != res.MetaChunks {
		t.Fatalf("index has %d metadata chunks, the result says %d", len(ix.Meta), res.MetaChunks)
	}
	isMeta := func(off int64) bool { _, ok := slices.BinarySearch(ix.Meta, off/chunk); return ok }

	f, err := os.Open(kept)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := readSuper(f)
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := erofs.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	nid := func(name string) uint64 {
		fi, err := fs.Stat(fsys, name)
		if err != nil {
			t.Fatal(err)
		}
		return uint64(fi.Sys().(*erofs.Stat).Ino)
	}
	dataChunks, inodes, dirents := 0, 0, 0
	err = fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n := uint64(fi.Sys().(*erofs.Stat).Ino)
		if at := img.metaAddr + int64(n)*32; !isMeta(at) {
			t.Errorf("%s: inode at %d is in chunk %d, not a metadata chunk", name, at, at/chunk)
		}
		inodes++
		if name != "." {
			off, err := img.direntOffset(nid(path.Dir(name)), path.Base(name))
			if err != nil {
				return err
			}
			if !isMeta(off) {
				t.Errorf("%s: directory entry at %d is in chunk %d, not a metadata chunk", name, off, off/chunk)
			}
			dirents++
		}
		if d.Type().IsRegular() {
			for _, rg := range fi.(interface{ DataRange() []erofs.DataRange }).DataRange() {
				end := rg.Offset + rg.Size
				if rg.Offset%4096 == 0 { // in blocks of its own: its last block's rest is padding
					end = (end + 4095) / 4096 * 4096
				}
				for c := (rg.Offset + chunk - 1) / chunk; (c+1)*chunk <= end; c++ {
					if isMeta(c * chunk) {
						t.Errorf("%s: chunk %d holds only its data but is recorded as metadata", name, c)
					}
					dataChunks++
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if dataChunks == 0 || inodes < 1200 || dirents < 1200 {
		t.Fatalf("checked %d data chunks, %d inodes, %d entries: the tree is not what the test built", dataChunks, inodes, dirents)
	}
	t.Logf("%d of %d chunks hold metadata (%d inodes, %d entries, %d data chunks checked)", len(ix.Meta), len(ix.Hashes), inodes, dirents, dataChunks)
}

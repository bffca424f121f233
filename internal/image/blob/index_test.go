package blob

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestChunkIndexRoundTrip(t *testing.T) {
	for _, size := range []int{0, 1, 4096, 4097, 3*4096 + 17} {
		data := make([]byte, size)
		rand.Read(data)
		dg, ix, err := IndexReader(bytes.NewReader(data), 4096)
		if err != nil {
			t.Fatal(err)
		}
		if dg != FromBytes(data) || ix.BlobSize != int64(size) || int64(len(ix.Hashes)) != ix.Chunks() {
			t.Fatalf("size %d: digest %s size %d chunks %d/%d", size, dg, ix.BlobSize, len(ix.Hashes), ix.Chunks())
		}
		for i, h := range ix.Hashes {
			end := min((i+1)*4096, size)
			if h != sha256.Sum256(data[i*4096:end]) {
				t.Fatalf("size %d: chunk %d hash wrong", size, i)
			}
		}
		got, err := ParseChunkIndex(ix.Marshal())
		if err != nil || got.ChunkSize != 4096 || got.BlobSize != int64(size) || len(got.Hashes) != len(ix.Hashes) {
			t.Fatalf("size %d: parse: %+v %v", size, got, err)
		}
	}
}

func TestParseChunkIndexRejects(t *testing.T) {
	_, ix, _ := IndexReader(bytes.NewReader(make([]byte, 10000)), 4096)
	good := ix.Marshal()
	for name, b := range map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("XXXXXXXX"), good[8:]...),
		"truncated": good[:len(good)-1],
		"extra":     append(append([]byte{}, good...), 0),
		"chunk0":    append(append(append([]byte{}, good[:8]...), make([]byte, 8)...), good[16:]...),
	} {
		if _, err := ParseChunkIndex(b); errdefs.CodeOf(err) != api.CodeBadGateway {
			t.Errorf("%s: %v, want bad_gateway", name, err)
		}
	}
}

func FuzzParseChunkIndex(f *testing.F) {
	_, ix, _ := IndexReader(bytes.NewReader(make([]byte, 9000)), 4096)
	f.Add(ix.Marshal())
	f.Add([]byte(indexMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		ix, err := ParseChunkIndex(b)
		if err != nil {
			return
		}
		if int64(len(ix.Hashes)) != ix.Chunks() || !bytes.Equal(ix.Marshal(), b) {
			t.Fatalf("accepted an index that does not round-trip")
		}
	})
}

func TestReadSmall(t *testing.T) {
	dir := t.TempDir()
	st, err := NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("a small blob")
	dg := FromBytes(data)
	if err := st.Put(t.Context(), dg, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadSmall(t.Context(), st, dg, 100); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("read: %q %v", b, err)
	}
	for name, c := range map[string]struct {
		digest string
		max    int64
		code   api.Code
	}{
		"missing":   {FromBytes([]byte("other")), 100, api.CodeNotFound},
		"too large": {dg, 4, api.CodeBadGateway},
		"bad":       {"sha256:xyz", 100, api.CodeInvalidArgument},
	} {
		if _, err := ReadSmall(t.Context(), st, c.digest, c.max); errdefs.CodeOf(err) != c.code {
			t.Errorf("%s: %v, want %s", name, err, c.code)
		}
	}
	// Same size, other content, under the blob's name: a digest mismatch.
	p := filepath.Join(dir, "sha256", dg[7:])
	if err := os.WriteFile(p, bytes.Repeat([]byte("x"), len(data)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSmall(t.Context(), st, dg, 100); errdefs.CodeOf(err) != api.CodeBadGateway {
		t.Fatalf("tampered blob: %v", err)
	}
}

func TestChunkIndexMetaRoundTrip(t *testing.T) {
	_, ix, _ := IndexReader(bytes.NewReader(make([]byte, 11*4096+5)), 4096) // 12 chunks
	ix.Meta = []int64{0, 3, 8, 11}
	b := ix.Marshal()
	got, err := ParseChunkIndex(b)
	if err != nil || !slices.Equal(got.Meta, ix.Meta) || len(got.Hashes) != 12 {
		t.Fatalf("parse: meta %v hashes %d err %v", got.Meta, len(got.Hashes), err)
	}
	// A bit past the last chunk, an empty bitmap or a missing byte is refused.
	bad := bytes.Clone(b)
	bad[len(bad)-1] |= 0x80
	empty := bytes.Clone(b)
	empty[len(empty)-1], empty[len(empty)-2] = 0, 0
	for name, c := range map[string][]byte{"past end": bad, "empty": empty, "short": b[:len(b)-1]} {
		if _, err := ParseChunkIndex(c); errdefs.CodeOf(err) != api.CodeBadGateway {
			t.Errorf("%s: got %v, want bad_gateway", name, err)
		}
	}
	ix.Meta = nil
	if got, err := ParseChunkIndex(ix.Marshal()); err != nil || got.Meta != nil {
		t.Fatalf("without meta: %v %v", got.Meta, err)
	}
}

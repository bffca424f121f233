package blob

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// ChunkIndex is the sha256 of every fixed-size chunk of a blob. It is stored as a
// blob of its own (named by its digest, which the layer's manifest records), so a
// node reading a layer on demand verifies each chunk it fetches without having the
// whole blob: the manifest pins the index, the index pins every chunk.
type ChunkIndex struct {
	ChunkSize int64
	BlobSize  int64
	Hashes    [][32]byte
}

// DefaultIndexChunk is the chunk size layers are indexed with (and so read with);
// see `dsec bench image --chunk-sweep`.
const DefaultIndexChunk = 64 << 10

const (
	indexMagic  = "DSECCIX1"
	indexHeader = 8 + 8 + 8 // magic, chunk size, blob size
	// maxIndexChunks bounds a parsed index (1 TiB of blob at 64 KiB chunks).
	maxIndexChunks = 1 << 24
)

// IndexReader hashes r (the whole blob) in one pass: its digest, size and chunk
// index at chunk bytes per chunk.
func IndexReader(r io.Reader, chunk int64) (digest string, ix ChunkIndex, err error) {
	if chunk <= 0 {
		return "", ix, errdefs.Invalid("chunk size %d", chunk)
	}
	ix.ChunkSize = chunk
	whole := sha256.New()
	buf := make([]byte, chunk)
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			whole.Write(buf[:n])
			ix.Hashes = append(ix.Hashes, sha256.Sum256(buf[:n]))
			ix.BlobSize += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return "", ix, rerr
		}
	}
	return "sha256:" + hex.EncodeToString(whole.Sum(nil)), ix, nil
}

// Chunks is the number of chunks the index must have for its blob size.
func (ix ChunkIndex) Chunks() int64 {
	if ix.ChunkSize <= 0 {
		return 0
	}
	return (ix.BlobSize + ix.ChunkSize - 1) / ix.ChunkSize
}

// Marshal encodes the index: "DSECCIX1", chunk size and blob size as little-endian
// uint64, then one 32-byte sha256 per chunk.
func (ix ChunkIndex) Marshal() []byte {
	b := make([]byte, indexHeader, indexHeader+32*len(ix.Hashes))
	copy(b, indexMagic)
	binary.LittleEndian.PutUint64(b[8:], uint64(ix.ChunkSize))
	binary.LittleEndian.PutUint64(b[16:], uint64(ix.BlobSize))
	for _, h := range ix.Hashes {
		b = append(b, h[:]...)
	}
	return b
}

// ParseChunkIndex decodes an index; anything malformed is a bad_gateway class
// error (the blob store returned something that is not an index).
func ParseChunkIndex(b []byte) (ChunkIndex, error) {
	bad := func(format string, a ...any) (ChunkIndex, error) {
		return ChunkIndex{}, errdefs.Wrap(api.CodeBadGateway, ErrDigestMismatch, "chunk index: %s", fmt.Sprintf(format, a...))
	}
	if len(b) < indexHeader || string(b[:8]) != indexMagic {
		return bad("not an index (bad magic)")
	}
	ix := ChunkIndex{ChunkSize: int64(binary.LittleEndian.Uint64(b[8:])), BlobSize: int64(binary.LittleEndian.Uint64(b[16:]))}
	if ix.ChunkSize < 4096 || ix.ChunkSize > 64<<20 || ix.BlobSize < 0 {
		return bad("chunk size %d / blob size %d out of range", ix.ChunkSize, ix.BlobSize)
	}
	n := ix.Chunks()
	if n > maxIndexChunks || int64(len(b)-indexHeader) != 32*n {
		return bad("%d bytes of hashes for %d chunks", len(b)-indexHeader, n)
	}
	ix.Hashes = make([][32]byte, n)
	for i := range ix.Hashes {
		copy(ix.Hashes[i][:], b[indexHeader+32*i:])
	}
	return ix, nil
}

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
//
// Meta, if set, lists (ascending) the chunks of an EROFS layer that hold file
// system metadata (superblock, inodes, directory blocks, xattrs, inline tails:
// everything but regular-file data), recorded when the layer is built; a node
// mounting the layer fetches them first (internal/image/lazy).
type ChunkIndex struct {
	ChunkSize int64
	BlobSize  int64
	Hashes    [][32]byte
	Meta      []int64
}

// DefaultIndexChunk is the chunk size layers are indexed with (and so read with);
// see `dsec bench image --chunk-sweep`.
const DefaultIndexChunk = 64 << 10

const (
	indexMagic  = "DSECCIX1"
	indexMagic2 = "DSECCIX2" // with a bitmap of the metadata chunks after the hashes
	indexHeader = 8 + 8 + 8  // magic, chunk size, blob size
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
// uint64, then one 32-byte sha256 per chunk. An index with Meta is "DSECCIX2"
// and ends with a bitmap of ceil(chunks/8) bytes, bit i%8 of byte i/8 set for a
// metadata chunk i.
func (ix ChunkIndex) Marshal() []byte {
	nmap := 0
	if len(ix.Meta) > 0 {
		nmap = (len(ix.Hashes) + 7) / 8
	}
	b := make([]byte, indexHeader, indexHeader+32*len(ix.Hashes)+nmap)
	copy(b, indexMagic)
	if nmap > 0 {
		copy(b, indexMagic2)
	}
	binary.LittleEndian.PutUint64(b[8:], uint64(ix.ChunkSize))
	binary.LittleEndian.PutUint64(b[16:], uint64(ix.BlobSize))
	for _, h := range ix.Hashes {
		b = append(b, h[:]...)
	}
	if nmap > 0 {
		bm := make([]byte, nmap)
		for _, c := range ix.Meta {
			if c >= 0 && int(c) < len(ix.Hashes) {
				bm[c/8] |= 1 << (c % 8)
			}
		}
		b = append(b, bm...)
	}
	return b
}

// ParseChunkIndex decodes an index; anything malformed is a bad_gateway class
// error (the blob store returned something that is not an index).
func ParseChunkIndex(b []byte) (ChunkIndex, error) {
	bad := func(format string, a ...any) (ChunkIndex, error) {
		return ChunkIndex{}, errdefs.Wrap(api.CodeBadGateway, ErrDigestMismatch, "chunk index: %s", fmt.Sprintf(format, a...))
	}
	if len(b) < indexHeader || (string(b[:8]) != indexMagic && string(b[:8]) != indexMagic2) {
		return bad("not an index (bad magic)")
	}
	withMeta := string(b[:8]) == indexMagic2
	ix := ChunkIndex{ChunkSize: int64(binary.LittleEndian.Uint64(b[8:])), BlobSize: int64(binary.LittleEndian.Uint64(b[16:]))}
	if ix.ChunkSize < 4096 || ix.ChunkSize > 64<<20 || ix.BlobSize < 0 {
		return bad("chunk size %d / blob size %d out of range", ix.ChunkSize, ix.BlobSize)
	}
	n := ix.Chunks()
	var nmap int64
	if withMeta {
		nmap = (n + 7) / 8
	}
	if n > maxIndexChunks || int64(len(b)-indexHeader) != 32*n+nmap {
		return bad("%d bytes of hashes for %d chunks", len(b)-indexHeader, n)
	}
	ix.Hashes = make([][32]byte, n)
	for i := range ix.Hashes {
		copy(ix.Hashes[i][:], b[indexHeader+32*i:])
	}
	bm := b[indexHeader+32*n:]
	for c := int64(0); c < n && withMeta; c++ {
		if bm[c/8]&(1<<(c%8)) != 0 {
			ix.Meta = append(ix.Meta, c)
		}
	}
	if withMeta && (len(ix.Meta) == 0 || (n%8 != 0 && bm[len(bm)-1]>>(n%8) != 0)) {
		return bad("metadata bitmap marks no chunk or chunks past the end")
	}
	return ix, nil
}

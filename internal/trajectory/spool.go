package trajectory

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"os"
	"sync"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// spooled is a request body read ahead of a step (its hash is part of the
// fingerprint): in memory up to MaxBodyLog bytes, the rest in a temporary file.
type spooled struct {
	data   []byte // the whole body when stored
	stored bool
	size   int64
	sum    string
	file   *os.File
}

// spool reads r (at most limit bytes; more is payload_too_large; limit <= 0: no
// limit). Errors reading r are returned as they are (the caller's body).
func spool(r io.Reader, limit int64, tempDir string) (*spooled, error) {
	if r == nil {
		r = bytes.NewReader(nil)
	}
	if limit > 0 {
		r = &capReader{r: r, n: limit}
	}
	h := sha256.New()
	var mem bytes.Buffer
	n, err := io.Copy(io.MultiWriter(&mem, h), io.LimitReader(r, MaxBodyLog+1))
	if err != nil {
		return nil, err
	}
	if n <= MaxBodyLog {
		return &spooled{data: mem.Bytes(), stored: true, size: n, sum: hex.EncodeToString(h.Sum(nil))}, nil
	}
	f, err := os.CreateTemp(tempDir, "dsec-step-")
	if err != nil {
		return nil, errdefs.Internal(err, "spooling the request body")
	}
	sp := &spooled{file: f}
	if _, err := f.Write(mem.Bytes()); err != nil {
		sp.close()
		return nil, errdefs.Internal(err, "spooling the request body")
	}
	m, err := io.Copy(io.MultiWriter(f, h), r)
	if err != nil {
		sp.close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		sp.close()
		return nil, errdefs.Internal(err, "spooling the request body")
	}
	sp.size, sp.sum = n+m, hex.EncodeToString(h.Sum(nil))
	return sp, nil
}

// reader returns the body again.
func (sp *spooled) reader() io.Reader {
	if sp.file != nil {
		return sp.file
	}
	return bytes.NewReader(sp.data)
}

func (sp *spooled) close() {
	if sp.file != nil {
		sp.file.Close()
		os.Remove(sp.file.Name())
	}
}

// capReader fails with payload_too_large past n bytes.
type capReader struct {
	r io.Reader
	n int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.n < 0 {
		return 0, errTooLarge()
	}
	if int64(len(p)) > c.n+1 {
		p = p[:c.n+1]
	}
	k, err := c.r.Read(p)
	c.n -= int64(k)
	if c.n < 0 {
		return k, errTooLarge()
	}
	return k, err
}

func errTooLarge() error {
	return api.NewError(api.CodePayloadTooLarge, "the request body exceeds the upload limit")
}

// bigReader passes an answer over MaxBodyLog through to the caller (head first,
// then the rest), hashing it, and logs the step as truncated at EOF or once
// total bytes (if >= 0) were read; closed before, the step is of unknown outcome.
type bigReader struct {
	l     *live
	r     io.Reader
	rest  io.ReadCloser
	sum   hash.Hash
	size  int64
	total int64
	once  sync.Once
}

func newBigReader(l *live, head []byte, rest io.ReadCloser, total int64) *bigReader {
	return &bigReader{l: l, r: io.MultiReader(bytes.NewReader(head), rest), rest: rest, sum: sha256.New(), total: total}
}

func (b *bigReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.sum.Write(p[:n])
	b.size += int64(n)
	if errors.Is(err, io.EOF) || b.size == b.total {
		b.once.Do(func() { b.l.finish(truncatedResult(b.size, hex.EncodeToString(b.sum.Sum(nil)))) })
	}
	return n, err
}

func (b *bigReader) Close() error {
	b.once.Do(func() { b.l.abort(MarkUnknown) })
	return b.rest.Close()
}

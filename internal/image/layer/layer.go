// Package layer builds layers: EROFS file system images (written in pure Go with
// github.com/erofs/go-erofs) named by their sha256 and stored in a blob.Store. A
// layer is built from a directory, a tar or tar.gz, or an OCI image (a registry, an
// OCI layout directory or a docker-archive tar; multi-layer images are flattened
// honouring whiteouts and opaque directories). Owners, modes (incl. setuid/sticky),
// mtimes, xattrs, symlinks and device nodes are kept.
package layer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	erofs "github.com/erofs/go-erofs"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/blob"
)

// Source names what a layer is built from: KIND:ARG with KIND one of dir, tar
// (plain, gzip or zstd-less tar.gz), oci (a registry reference), oci-layout (an OCI
// image layout directory, optionally PATH@REF or PATH@sha256:... to pick one image)
// and docker-archive (a `docker save` tar, optionally PATH@TAG).
type Source struct {
	Kind string
	Arg  string
}

func (s Source) String() string { return s.Kind + ":" + s.Arg }

// ParseSource parses "dir:PATH", "tar:PATH", "oci:REF", "oci-layout:PATH",
// "docker-archive:PATH".
func ParseSource(s string) (Source, error) {
	kind, arg, ok := strings.Cut(s, ":")
	if !ok || arg == "" {
		return Source{}, errdefs.Invalid("layer source %q: want dir:PATH, tar:PATH, oci:REF, oci-layout:PATH or docker-archive:PATH", s)
	}
	switch kind {
	case "dir", "tar", "oci", "oci-layout", "docker-archive":
		return Source{Kind: kind, Arg: arg}, nil
	}
	return Source{}, errdefs.Invalid("layer source %q: unknown kind %q (dir, tar, oci, oci-layout, docker-archive)", s, kind)
}

// Result is a built layer: the layer (its Digest, Size in bytes of the EROFS
// blob, Index: the digest of its chunk index (blob.ChunkIndex), stored beside
// it, with which a node reading the layer on demand verifies every chunk, and
// Config: the image config of an OCI source) plus what the build did.
type Result struct {
	image.Layer
	Source      string `json:"source"`       // what it was built from
	Entries     int    `json:"entries"`      // files, dirs, links, nodes
	ContentSize int64  `json:"content_size"` // bytes of regular-file data
	// MetaChunks is how many chunks of the index hold EROFS metadata (the
	// index's Meta): what a node fetches when it mounts the layer.
	MetaChunks int           `json:"meta_chunks"`
	BuildTime  time.Duration `json:"build_ns"`
}

// Options tune a build.
type Options struct {
	// TempDir holds the image being written and go-erofs's data spool (default: os.TempDir()).
	TempDir string
	// Progress, if set, is called now and then with the file bytes read so far.
	Progress func(bytes int64)
	// IndexChunk is the chunk size of the layer's index (default
	// blob.DefaultIndexChunk); nodes read the layer in chunks of this size.
	IndexChunk int64
	// Keep, if set, receives the path of the finished EROFS file instead of it being
	// removed (the caller owns it).
	Keep func(path string)
	// Remote are go-containerregistry options for an oci:REF source (auth,
	// transport, mirrors: internal/image/registry), after dsec's defaults.
	Remote []remote.Option
}

// Build builds src into an EROFS image, hashes it and puts it into store. An
// OCI source's image config (Env, WorkingDir, User, Entrypoint, Cmd) is kept in
// the result's Config.
func Build(ctx context.Context, src Source, store blob.Store, opts Options) (Result, error) {
	return build(ctx, src, store, opts, func(b *builder) error {
		switch src.Kind {
		case "dir":
			return b.addDir(src.Arg)
		case "tar":
			return b.addTarFile(src.Arg)
		case "oci", "oci-layout", "docker-archive":
			return b.addOCI(src)
		}
		return errdefs.Invalid("layer source kind %q", src.Kind)
	})
}

// BuildOCILayer converts one OCI image layer (r: its uncompressed tar) into an
// EROFS layer in overlayfs's format, so that layers stacked as overlayfs
// lowers give the image's file system: a whiteout ".wh.NAME" becomes a 0/0
// character device NAME, an opaque marker ".wh..wh..opq" the xattr
// trusted.overlay.opaque="y" on its directory. label names the layer in
// errors (its digest).
func BuildOCILayer(ctx context.Context, label string, r io.Reader, store blob.Store, opts Options) (Result, error) {
	src := Source{Kind: "oci-layer", Arg: label}
	return build(ctx, src, store, opts, func(b *builder) error {
		b.overlay = true
		return b.addTar(r)
	})
}

func build(ctx context.Context, src Source, store blob.Store, opts Options, fill func(*builder) error) (Result, error) {
	start := time.Now()
	f, err := os.CreateTemp(opts.TempDir, "dsec-layer-*.erofs")
	if err != nil {
		return Result{}, errdefs.Internal(err, "layer build: temp file")
	}
	keep := false
	defer func() {
		f.Close()
		if !keep {
			os.Remove(f.Name())
		}
	}()
	b := newBuilder(ctx, f, opts)
	err = fill(b)
	if err == nil {
		err = b.close()
	}
	if err != nil {
		return Result{}, classify(err, src)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Result{}, errdefs.Internal(err, "layer build: rewind")
	}
	if opts.IndexChunk <= 0 {
		opts.IndexChunk = blob.DefaultIndexChunk
	}
	dg, ix, err := blob.IndexReader(f, opts.IndexChunk)
	if err != nil {
		return Result{}, errdefs.Internal(err, "layer build: hash")
	}
	size := ix.BlobSize
	if ix.Meta, err = MetaChunks(f, size, opts.IndexChunk); err != nil {
		return Result{}, errdefs.Internal(err, "layer build: metadata chunks")
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Result{}, errdefs.Internal(err, "layer build: rewind")
	}
	if err := store.Put(ctx, dg, f, size); err != nil {
		return Result{}, fmt.Errorf("layer build %s: store: %w", src, err)
	}
	ixb := ix.Marshal()
	ixd := blob.FromBytes(ixb)
	if err := store.Put(ctx, ixd, bytes.NewReader(ixb), int64(len(ixb))); err != nil {
		return Result{}, fmt.Errorf("layer build %s: store the chunk index: %w", src, err)
	}
	if opts.Keep != nil {
		keep = true
		opts.Keep(f.Name())
	}
	return Result{Layer: image.Layer{Digest: dg, Size: size, Index: ixd, Config: b.config},
		Source: src.String(), Entries: b.entries, ContentSize: b.read, MetaChunks: len(ix.Meta), BuildTime: time.Since(start)}, nil
}

// Inspect opens an EROFS blob file for reading (checks it parses).
func Inspect(r io.ReaderAt) error {
	_, err := erofs.Open(r)
	return err
}

func classify(err error, src Source) error {
	var e *errdefs.Error
	if asErr(err, &e) {
		return err
	}
	if os.IsNotExist(err) {
		return errdefs.NotFound("layer source %s: %v", src, err)
	}
	if ctxDone(err) {
		return err
	}
	return errdefs.Invalid("layer build from %s: %v", src, err)
}

package blob

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// fsStore keeps blobs as files ROOT/sha256/<hex>. Temporary files live next to them
// (ROOT/sha256/.tmp-*) so the final rename/link never crosses a file system.
type fsStore struct {
	root   string
	shared bool // POSIX mode: many writers on many nodes, never overwrite, retry stale handles
}

// NewDir returns a store in the local directory path (created if missing):
// path/sha256/<hex>, written to a temp file, fsynced, renamed into place.
func NewDir(path string) (Store, error) { return newFS(path, false) }

// NewPOSIX returns a store on a shared distributed-file-system mount (3FS, JuiceFS,
// CephFS, NFS): the same layout as NewDir, but a blob is written under a unique temp
// name and hard-linked into place (falling back to a no-replace rename), so concurrent
// writers on many nodes never overwrite or expose a partial blob; stale-handle errors
// are retried.
func NewPOSIX(mountPath string) (Store, error) {
	fi, err := os.Stat(mountPath)
	if err != nil {
		return nil, Unavailable(err, "blob store mount %s", mountPath)
	}
	if !fi.IsDir() {
		return nil, errdefs.Invalid("blob store mount %s is not a directory", mountPath)
	}
	return newFS(mountPath, true)
}

func newFS(path string, shared bool) (Store, error) {
	if path == "" {
		return nil, errdefs.Invalid("blob store: empty directory")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, errdefs.Invalid("blob store directory %q: %v", path, err)
	}
	if err := os.MkdirAll(filepath.Join(abs, "sha256"), 0o755); err != nil {
		return nil, Unavailable(err, "blob store directory %s", abs)
	}
	return &fsStore{root: abs, shared: shared}, nil
}

func (s *fsStore) String() string {
	if s.shared {
		return "posix:" + s.root
	}
	return "dir:" + s.root
}

func (s *fsStore) path(digest string) (string, error) {
	h, err := ParseDigest(digest)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.root, "sha256", h), nil
}

// retry runs op, repeating it a few times on stale-handle style errors when shared.
func (s *fsStore) retry(op func() error) error {
	err := op()
	if !s.shared {
		return err
	}
	for i := 0; i < 4 && isStale(err); i++ {
		time.Sleep(time.Duration(10<<i) * time.Millisecond)
		err = op()
	}
	return err
}

func isStale(err error) bool {
	return errors.Is(err, syscall.ESTALE) || errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EAGAIN) ||
		errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.ETIMEDOUT)
}

func (s *fsStore) classify(err error, digest, op string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return errdefs.NotFound("blob %s not found in %s", digest, s)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return ctxErr(err, op)
	}
	var e *errdefs.Error
	if errors.As(err, &e) {
		return err
	}
	return Unavailable(err, "blob %s %s in %s", op, short(digest), s)
}

func (s *fsStore) Put(ctx context.Context, digest string, r io.Reader, size int64) error {
	final, err := s.path(digest)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return ctxErr(err, "put")
	}
	// Already complete (names are content addresses): nothing to do.
	if fi, err := os.Stat(final); err == nil && fi.Mode().IsRegular() && (size < 0 || fi.Size() == size) {
		return nil
	}
	tmp, err := s.tempFile()
	if err != nil {
		return Unavailable(err, "blob put %s", short(digest))
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // after a link or a failure; a no-op after rename
	v := newVerifier(ctx, r, size)
	_, cerr := io.Copy(tmp, v)
	if cerr == nil {
		cerr = tmp.Sync()
	}
	if err := tmp.Close(); cerr == nil {
		cerr = err
	}
	if cerr != nil {
		return s.classify(cerr, digest, "put")
	}
	if err := v.check(digest); err != nil {
		return err
	}
	if err := os.Chmod(tmpName, 0o444); err != nil {
		return Unavailable(err, "blob put %s", short(digest))
	}
	if s.shared {
		// link fails with EEXIST if another node finished first: its blob is complete
		// and identical, keep it.
		err = s.retry(func() error { return os.Link(tmpName, final) })
		if err != nil && !errors.Is(err, os.ErrExist) {
			if !isLinkUnsupported(err) {
				return Unavailable(err, "blob put %s: link into place", short(digest))
			}
			// File systems without hard links: rename without replacing.
			err = renameNoReplace(tmpName, final)
			if err != nil && !errors.Is(err, os.ErrExist) {
				return Unavailable(err, "blob put %s: rename into place", short(digest))
			}
		}
	} else if err := os.Rename(tmpName, final); err != nil {
		return Unavailable(err, "blob put %s: rename into place", short(digest))
	}
	syncDir(filepath.Dir(final))
	return nil
}

func isLinkUnsupported(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.EOPNOTSUPP) ||
		errors.Is(err, syscall.EXDEV) || errors.Is(err, syscall.EMLINK)
}

func renameNoReplace(from, to string) error {
	const renameNoreplace = 1 // RENAME_NOREPLACE
	err := renameat2(from, to, renameNoreplace)
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSYS) {
		// No RENAME_NOREPLACE here: check then rename (a tiny window, identical content).
		if _, serr := os.Lstat(to); serr == nil {
			return os.ErrExist
		}
		return os.Rename(from, to)
	}
	return err
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// tempHost is this host's part of temporary blob names.
func tempHost() string {
	host, _ := os.Hostname()
	return strings.ReplaceAll(host, "/", "_")
}

func (s *fsStore) tempFile() (*os.File, error) {
	var b [8]byte
	rand.Read(b[:])
	name := fmt.Sprintf(".tmp-%s-%d-%s", tempHost(), os.Getpid(), hex.EncodeToString(b[:]))
	return os.OpenFile(filepath.Join(s.root, "sha256", name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
}

func (s *fsStore) open(digest string) (*os.File, error) {
	p, err := s.path(digest)
	if err != nil {
		return nil, err
	}
	var f *os.File
	err = s.retry(func() (e error) { f, e = os.Open(p); return e })
	if err != nil {
		return nil, s.classify(err, digest, "open")
	}
	return f, nil
}

func (s *fsStore) Open(ctx context.Context, digest string) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, ctxErr(err, "open")
	}
	return s.open(digest)
}

func (s *fsStore) ReadAt(ctx context.Context, digest string, p []byte, off int64) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, ctxErr(err, "read")
	}
	if off < 0 {
		return 0, errdefs.Invalid("blob read %s: negative offset", short(digest))
	}
	f, err := s.open(digest)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int
	err = s.retry(func() (e error) { n, e = f.ReadAt(p, off); return e })
	if err == io.EOF {
		return n, io.EOF
	}
	if err != nil {
		return n, s.classify(err, digest, "read")
	}
	return n, nil
}

func (s *fsStore) Stat(ctx context.Context, digest string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, ctxErr(err, "stat")
	}
	p, err := s.path(digest)
	if err != nil {
		return 0, err
	}
	var fi os.FileInfo
	err = s.retry(func() (e error) { fi, e = os.Stat(p); return e })
	if err != nil {
		return 0, s.classify(err, digest, "stat")
	}
	return fi.Size(), nil
}

func (s *fsStore) Delete(ctx context.Context, digest string) error {
	if err := ctx.Err(); err != nil {
		return ctxErr(err, "delete")
	}
	p, err := s.path(digest)
	if err != nil {
		return err
	}
	if err := s.retry(func() error { return os.Remove(p) }); err != nil {
		return s.classify(err, digest, "delete")
	}
	return nil
}

func (s *fsStore) List(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, ctxErr(err, "list")
	}
	var ents []os.DirEntry
	err := s.retry(func() (e error) { ents, e = os.ReadDir(filepath.Join(s.root, "sha256")); return e })
	if err != nil {
		return nil, Unavailable(err, "blob list %s", s)
	}
	out := []string{}
	for _, e := range ents {
		if _, err := ParseDigest("sha256:" + e.Name()); err == nil && e.Type().IsRegular() {
			out = append(out, "sha256:"+e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// RemoveStaleTemp removes the temporary files of Puts that this host's
// processes started and never finished because they are gone (killed in the
// middle of a write). Temporary files of live processes and of other hosts
// (a shared mount) are left alone. It returns how many it removed.
func (s *fsStore) RemoveStaleTemp() (int, error) {
	dir := filepath.Join(s.root, "sha256")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, Unavailable(err, "blob store directory %s", dir)
	}
	prefix := ".tmp-" + tempHost() + "-"
	n := 0
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) == nil || errors.Is(syscall.Kill(pid, 0), syscall.EPERM) {
			continue // not ours, or its writer still runs
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return n, Unavailable(err, "blob store temporary file %s", e.Name())
		}
		n++
	}
	return n, nil
}

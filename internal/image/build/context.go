package build

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// MaxContextBytes bounds the file data of a build context sent as a tar.
const MaxContextBytes = 4 << 30

// FromTar unpacks a build context (a tar stream, plain or gzip) into a new
// directory under scratch, runs req with it and removes it. The Dockerfile is
// req.Dockerfile inside the context (default "Dockerfile").
func (b *Builder) FromTar(ctx context.Context, scratch string, req api.BuildImageRequest, r io.Reader) (api.BuildImageResult, error) {
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return api.BuildImageResult{}, errdefs.Internal(err, "build scratch dir")
	}
	dir, err := os.MkdirTemp(scratch, "build-")
	if err != nil {
		return api.BuildImageResult{}, errdefs.Internal(err, "build scratch dir")
	}
	defer os.RemoveAll(dir)
	if err := ExtractContext(dir, r); err != nil {
		return api.BuildImageResult{}, err
	}
	df := req.Dockerfile
	if df == "" {
		df = "Dockerfile"
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return api.BuildImageResult{}, errdefs.Internal(err, "open the build context")
	}
	text, err := root.ReadFile(strings.TrimPrefix(path.Clean("/"+df), "/"))
	root.Close()
	if err != nil {
		return api.BuildImageResult{}, errdefs.Invalid("Dockerfile %q: not in the build context (%v)", df, unwrapPath(err))
	}
	return b.Build(ctx, Request{BuildImageRequest: req, DockerfileText: text, ContextDir: dir})
}

// ExtractContext unpacks a build context tar into dir through an os.Root, so
// no entry lands outside it: regular files, directories and symlinks (kept as
// they are; a COPY resolves them inside the context); other types are left
// out. Owners are not kept (COPY writes root's unless --chown).
func ExtractContext(dir string, r io.Reader) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return errdefs.Internal(err, "open the build context")
	}
	defer root.Close()
	br := bufio.NewReader(r)
	var src io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return errdefs.Invalid("build context: bad gzip stream: %v", err)
		}
		defer gz.Close()
		src = gz
	}
	tr := tar.NewReader(src)
	var total int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return errdefs.Invalid("build context: bad tar stream: %v", err)
		}
		name := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if name == "" {
			continue
		}
		mode := fs.FileMode(hdr.Mode) & fs.ModePerm
		if err := mkParents(root, name); err != nil {
			return err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = root.MkdirAll(name, mode|0o700)
		case tar.TypeReg:
			total += hdr.Size
			if total > MaxContextBytes {
				return errdefs.New(api.CodePayloadTooLarge, "build context: more than %d bytes of files", int64(MaxContextBytes))
			}
			err = writeFile(root, name, mode, tr)
		case tar.TypeSymlink:
			_ = root.Remove(name)
			err = root.Symlink(hdr.Linkname, name)
		default:
			continue
		}
		if err == nil && hdr.Typeflag != tar.TypeSymlink {
			err = setUserXattrs(root, name, hdr.PAXRecords)
		}
		if err != nil {
			return errdefs.Invalid("build context: %s: %v", name, unwrapPath(err))
		}
	}
}

func mkParents(root *os.Root, name string) error {
	if d := path.Dir(name); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return errdefs.Invalid("build context: %s: %v", name, unwrapPath(err))
		}
	}
	return nil
}

func writeFile(root *os.Root, name string, mode fs.FileMode, r io.Reader) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return fmt.Errorf("write: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return root.Chmod(name, mode)
}

// WriteContext writes directory dir as a build context tar (regular files,
// directories and symlinks, names relative to dir; what ExtractContext
// reads), then extra files (name → contents) at the top. Paths matched by
// dir/.dockerignore are left out as docker build leaves them out (the
// Dockerfile and .dockerignore themselves are always sent).
func WriteContext(w io.Writer, dir string, extra map[string][]byte) error {
	tw := tar.NewWriter(w)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	ignore, err := dockerignore(root)
	if err != nil {
		return err
	}
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		if _, ok := extra[p]; ok {
			return nil
		}
		if ignore != nil && p != "Dockerfile" && p != ".dockerignore" {
			if skip, err := ignore.MatchesOrParentMatches(p); err != nil {
				return err
			} else if skip {
				if d.IsDir() && !ignore.Exclusions() {
					return fs.SkipDir
				}
				return nil
			}
		}
		fi, err := root.Lstat(p)
		if err != nil {
			return err
		}
		var link string
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = root.Readlink(p); err != nil {
				return err
			}
		case !fi.IsDir() && !fi.Mode().IsRegular():
			return nil
		}
		return writeEntry(tw, root, p, fi, link)
	})
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(extra)) {
		b := extra[name]
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	return tw.Close()
}

func writeEntry(tw *tar.Writer, root *os.Root, p string, fi fs.FileInfo, link string) error {
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return err
	}
	hdr.Name, hdr.Uname, hdr.Gname = p, "", ""
	if fi.IsDir() {
		hdr.Name += "/"
	}
	if hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeDir {
		return tw.WriteHeader(hdr)
	}
	f, err := root.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	for k, v := range userXattrs(f) { // COPY keeps them
		if hdr.PAXRecords == nil {
			hdr.PAXRecords = map[string]string{}
		}
		hdr.PAXRecords[paxXattr+k] = v
	}
	if err := tw.WriteHeader(hdr); err != nil || hdr.Typeflag != tar.TypeReg {
		return err
	}
	_, err = io.CopyN(tw, f, hdr.Size)
	return err
}

// setUserXattrs sets the user.* attributes of a context entry's PAX records
// on name (a file system without them keeps none).
func setUserXattrs(root *os.Root, name string, pax map[string]string) error {
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for k, v := range pax {
		x, ok := strings.CutPrefix(k, paxXattr)
		if !ok || !strings.HasPrefix(x, "user.") {
			continue
		}
		if f == nil {
			var err error
			if f, err = root.Open(name); err != nil {
				return err
			}
		}
		if err := unix.Fsetxattr(int(f.Fd()), x, []byte(v), 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) {
				return nil
			}
			return fmt.Errorf("setxattr %s: %w", x, err)
		}
	}
	return nil
}

// dockerignore reads the context's .dockerignore (nil if there is none).
func dockerignore(root *os.Root) (*patternmatcher.PatternMatcher, error) {
	f, err := root.Open(".dockerignore")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf(".dockerignore: %w", err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		return nil, fmt.Errorf(".dockerignore: %w", err)
	}
	return pm, nil
}

package build

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/patternmatcher"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/fsops"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// copySpec is a COPY or ADD.
type copySpec struct {
	cmd          string
	sd           instructions.SourcesAndDest
	chown, chmod string
	exclude      []string
	parents, add bool
}

// entry is one file a COPY writes: name relative to the directory it is
// extracted into, src relative to the context root.
type entry struct {
	name, src, link string
	fi              fs.FileInfo
}

// source is one COPY source as found in the context.
type source struct {
	rel string // relative to the context root
	fi  fs.FileInfo
}

func cleanAbs(p string) string { return path.Clean("/" + p) }

// contextRoot is the build context as COPY and ADD read it: paths the
// context's .dockerignore matches are not there (as in docker build, also
// the Dockerfile and .dockerignore when it names them).
type contextRoot struct {
	*os.Root
	ignore *patternmatcher.PatternMatcher
}

func openContext(dir string) (*contextRoot, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open the build context: %w", err)
	}
	pm, err := dockerignore(root)
	if err != nil {
		root.Close()
		return nil, errdefs.Invalid("build context: %v", err)
	}
	return &contextRoot{Root: root, ignore: pm}, nil
}

// ignored reports whether .dockerignore leaves rel (or a parent) out.
func (c *contextRoot) ignored(rel string) (bool, error) {
	if c.ignore == nil || rel == "." {
		return false, nil
	}
	return c.ignore.MatchesOrParentMatches(rel)
}

// sources resolves a COPY's sources in the context (wildcards expanded),
// refusing any that leaves it.
func (r *run) sources(root *contextRoot, spec copySpec, line int) ([]source, error) {
	var out []source
	for _, src := range spec.sd.SourcePaths {
		if spec.add && (strings.Contains(src, "://") || strings.HasPrefix(src, "git@")) {
			return nil, lineError(line, "ADD %s: remote sources are not supported (only local context files)", src)
		}
		clean := path.Clean(src)
		if clean == ".." || strings.HasPrefix(clean, "../") {
			return nil, lineError(line, "%s %s: the source is outside the build context", spec.cmd, src)
		}
		rel := strings.TrimPrefix(path.Clean("/"+clean), "/")
		if rel == "" {
			rel = "."
		}
		var names []string
		if strings.ContainsAny(rel, "*?[") {
			matches, err := fs.Glob(root.FS(), rel)
			if err != nil {
				return nil, lineError(line, "%s %s: %v", spec.cmd, src, err)
			}
			if len(matches) == 0 {
				return nil, lineError(line, "%s %s: no file in the build context matches", spec.cmd, src)
			}
			names = matches
		} else {
			names = []string{rel}
		}
		for _, n := range names {
			if skip, err := root.ignored(n); err != nil {
				return nil, lineError(line, "%s %s: .dockerignore: %v", spec.cmd, src, err)
			} else if skip {
				if len(names) > 1 {
					continue
				}
				return nil, lineError(line, "%s %s: not found in the build context (.dockerignore leaves it out)", spec.cmd, src)
			}
			fi, err := root.Stat(n)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil, lineError(line, "%s %s: not found in the build context", spec.cmd, src)
				}
				return nil, lineError(line, "%s %s: %v (a source must stay inside the build context)", spec.cmd, src, unwrapPath(err))
			}
			out = append(out, source{rel: n, fi: fi})
		}
	}
	return out, nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// archiveKind says whether context file rel is an archive ADD unpacks, by
// its contents as Docker decides: "tar", "gzip" or "bzip2" (a tar so
// compressed), "xz" or "zstd" (compressed, not unpacked by dsec), "" (copied
// as it is, whatever its name).
func archiveKind(root *contextRoot, rel string) (string, error) {
	f, err := root.Open(rel)
	if err != nil {
		return "", err
	}
	defer f.Close()
	head := make([]byte, 512)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	isTar := func(b []byte) bool { return len(b) >= 262 && string(b[257:262]) == "ustar" }
	var kind string
	var inner io.Reader
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		kind = "gzip"
	case bytes.HasPrefix(head, []byte("BZh")):
		kind = "bzip2"
	case bytes.HasPrefix(head, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return "xz", nil
	case bytes.HasPrefix(head, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return "zstd", nil
	case isTar(head):
		return "tar", nil
	default:
		return "", nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	if inner, err = decompress(kind, f); err != nil {
		return "", nil // not really compressed: copied as it is
	}
	b := make([]byte, 512)
	n, _ = io.ReadFull(inner, b)
	if !isTar(b[:n]) {
		return "", nil // a compressed file that is not a tar: copied as it is
	}
	return kind, nil
}

// decompress reads r as kind ("tar": as it is).
func decompress(kind string, r io.Reader) (io.Reader, error) {
	switch kind {
	case "gzip":
		return gzip.NewReader(r)
	case "bzip2":
		return bzip2.NewReader(r), nil
	}
	return r, nil
}

// entries lists what source s writes, names relative to the directory it is
// extracted into (prefix for a directory source's contents).
func entries(root *contextRoot, s source, prefix string) ([]entry, error) {
	if !s.fi.IsDir() {
		return []entry{{name: prefix, src: s.rel, fi: s.fi}}, nil
	}
	var out []entry
	err := fs.WalkDir(root.FS(), s.rel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == s.rel {
			return nil
		}
		if skip, err := root.ignored(p); err != nil {
			return err
		} else if skip {
			if d.IsDir() && !root.ignore.Exclusions() {
				return fs.SkipDir
			}
			return nil
		}
		fi, err := root.Lstat(p)
		if err != nil {
			return err
		}
		e := entry{name: path.Join(prefix, strings.TrimPrefix(p, s.rel+"/")), src: p, fi: fi}
		if s.rel == "." {
			e.name = path.Join(prefix, p)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if e.link, err = root.Readlink(p); err != nil {
				return err
			}
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

// copyPlan is where a COPY extracts: into dir, the entries, or for a single
// file whose destination is not known to be a directory, either dest as the
// file (asFile) or dest/base when dest is a directory in the image.
type copyPlan struct {
	dest    string
	destDir bool // dest names a directory (trailing slash, several sources or a directory source)
	srcs    []source
	digest  string
}

func (r *run) copyStep(ctx context.Context, st *state, spec copySpec, step *api.BuildStep) error {
	line := step.Line
	switch {
	case len(spec.exclude) > 0:
		return lineError(line, "%s --exclude is not supported", spec.cmd)
	case spec.parents:
		return lineError(line, "%s --parents is not supported", spec.cmd)
	case len(spec.sd.SourceContents) > 0:
		return lineError(line, "%s with a heredoc is not supported", spec.cmd)
	}
	root, err := openContext(r.req.ContextDir)
	if err != nil {
		return err
	}
	defer root.Close()
	srcs, err := r.sources(root, spec, line)
	if err != nil {
		return err
	}
	dest := spec.sd.DestPath
	plan := copyPlan{dest: joinPath(st.workdir(), dest), srcs: srcs,
		destDir: strings.HasSuffix(dest, "/") || dest == "." || strings.HasSuffix(dest, "/.")}
	if len(srcs) > 1 && !plan.destDir {
		return lineError(line, "%s with several sources: the destination %q must be a directory ending in /", spec.cmd, dest)
	}
	mode, err := parseChmod(spec.chmod)
	if err != nil {
		return lineError(line, "%s --chmod=%s: %v", spec.cmd, spec.chmod, err)
	}
	if plan.digest, err = contextDigest(root, plan); err != nil {
		return lineError(line, "%s: read the build context: %v", spec.cmd, err)
	}
	archives := map[string]string{}
	if spec.add {
		for _, src := range srcs {
			if src.fi.IsDir() {
				continue
			}
			kind, err := archiveKind(root, src.rel)
			if err != nil {
				return lineError(line, "ADD %s: %v", src.rel, err)
			}
			switch {
			case kind == "xz" || kind == "zstd":
				return lineError(line, "ADD %s: unpacking a %s archive is not supported (tar, gzip and bzip2 are); COPY it and RUN tar", src.rel, kind)
			case kind != "" && (spec.chown != "" || spec.chmod != ""):
				return lineError(line, "ADD --chown/--chmod of an archive (%s) is not supported", src.rel)
			}
			archives[src.rel] = kind
		}
	}
	key := st.chain(spec.cmd, "--chown="+spec.chown, "--chmod="+spec.chmod, plan.digest)
	return r.layerStep(ctx, st, key, step, func(ctx context.Context, w workspace) error {
		fsys, err := w.fs(ctx)
		if err != nil {
			return err
		}
		defer fsys.Close()
		uid, gid, err := chown(ctx, fsys, spec.chown)
		if err != nil {
			return lineError(line, "%s --chown=%s: %v", spec.cmd, spec.chown, err)
		}
		for _, s := range srcs {
			if kind := archives[s.rel]; kind != "" { // ADD unpacks it into the destination
				if err := r.unpack(ctx, fsys, root, s.rel, kind, plan.dest); err != nil {
					return fmt.Errorf("Dockerfile line %d: ADD %s: %w", line, s.rel, err)
				}
				continue
			}
			dir, prefix := plan.dest, ""
			if !s.fi.IsDir() {
				switch fi, serr := fsys.Stat(ctx, plan.dest); {
				case plan.destDir || serr == nil && fi.Type == "dir":
					prefix = path.Base(s.rel)
				default:
					dir, prefix = path.Dir(plan.dest), path.Base(plan.dest)
				}
			}
			ents, err := entries(root, s, prefix)
			if err != nil {
				return lineError(line, "%s %s: %v", spec.cmd, s.rel, err)
			}
			if err := mkdirOwned(ctx, fsys, dir, uid, gid); err != nil {
				return fmt.Errorf("Dockerfile line %d: %s: create %s: %w", line, spec.cmd, dir, err)
			}
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(writeTar(root, ents, pw, uid, gid, mode)) }()
			err = fsys.ExtractTar(ctx, dir, pr)
			pr.CloseWithError(io.ErrClosedPipe)
			if err != nil {
				return fmt.Errorf("Dockerfile line %d: %s %s: %w", line, spec.cmd, s.rel, err)
			}
		}
		return nil
	})
}

// contextDigest hashes what a COPY reads: names, types, modes, link targets
// and contents (not times), so an unchanged context hits the cache.
func contextDigest(root *contextRoot, plan copyPlan) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s %v\n", plan.dest, plan.destDir)
	for _, s := range plan.srcs {
		ents, err := entries(root, s, "")
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "src %s\n", s.rel)
		for _, e := range ents {
			fmt.Fprintf(h, "%q %o %q %d\n", e.name, e.fi.Mode(), e.link, e.fi.Size())
			if e.fi.Mode().IsRegular() || e.fi.IsDir() {
				f, err := root.Open(e.src)
				if err != nil {
					return "", err
				}
				x := userXattrs(f)
				for _, k := range slices.Sorted(maps.Keys(x)) {
					fmt.Fprintf(h, "xattr %q %q\n", k, x[k])
				}
				if e.fi.Mode().IsRegular() {
					_, err = io.Copy(h, f)
				}
				f.Close()
				if err != nil {
					return "", err
				}
			}
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// writeTar writes ents from the context as a tar, owned by uid:gid, with mode
// (if non-zero) for every file and directory.
func writeTar(root *contextRoot, ents []entry, w io.Writer, uid, gid int, mode fs.FileMode) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	tw := tar.NewWriter(bw)
	for _, e := range ents {
		hdr, err := tar.FileInfoHeader(e.fi, e.link)
		if err != nil {
			return err
		}
		hdr.Name, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = e.name, uid, gid, "", ""
		if e.fi.IsDir() {
			hdr.Name += "/"
		}
		if mode != 0 && hdr.Typeflag != tar.TypeSymlink {
			hdr.Mode = int64(mode)
		}
		var f *os.File
		if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeDir {
			if f, err = root.Open(e.src); err != nil {
				return err
			}
			// The file's user.* attributes go along, as buildah's COPY keeps them.
			for k, v := range userXattrs(f) {
				if hdr.PAXRecords == nil {
					hdr.PAXRecords = map[string]string{}
				}
				hdr.PAXRecords[paxXattr+k] = v
			}
		}
		err = tw.WriteHeader(hdr)
		if err == nil && hdr.Typeflag == tar.TypeReg {
			_, err = io.CopyN(tw, f, hdr.Size)
		}
		if f != nil {
			f.Close()
		}
		if err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// parseChmod parses --chmod's octal mode ("" is none).
func parseChmod(s string) (fs.FileMode, error) {
	if s == "" {
		return 0, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, fmt.Errorf("want an octal mode such as 0755")
	}
	return fs.FileMode(m), nil
}

// chown resolves --chown's USER[:GROUP] (names from the image's /etc/passwd
// and /etc/group, or numbers); "" is root.
func chown(ctx context.Context, fsys session.FS, s string) (int, int, error) {
	if s == "" {
		return 0, 0, nil
	}
	u, g, hasGroup := strings.Cut(s, ":")
	uid, pgid, err := lookup(ctx, fsys, "/etc/passwd", u)
	if err != nil {
		return 0, 0, err
	}
	gid := pgid
	if hasGroup {
		if gid, _, err = lookup(ctx, fsys, "/etc/group", g); err != nil {
			return 0, 0, err
		}
	}
	return uid, gid, nil
}

// lookup returns the id (and, in /etc/passwd, the primary group) of name.
func lookup(ctx context.Context, fsys session.FS, file, name string) (int, int, error) {
	if n, err := strconv.Atoi(name); err == nil && n >= 0 {
		return n, n, nil
	}
	rc, _, err := fsys.Open(ctx, file)
	if err != nil {
		return 0, 0, fmt.Errorf("%q is not a number and the image has no %s: %w", name, file, err)
	}
	defer rc.Close()
	sc := bufio.NewScanner(io.LimitReader(rc, 16<<20))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) >= 3 && f[0] == name {
			id, err := strconv.Atoi(f[2])
			if err != nil {
				break
			}
			gid := id
			if len(f) >= 4 {
				if g, err := strconv.Atoi(f[3]); err == nil {
					gid = g
				}
			}
			return id, gid, nil
		}
	}
	return 0, 0, fmt.Errorf("no %q in the image's %s", name, filepath.Base(file))
}

// paxXattr starts the PAX record of an extended attribute (GNU tar's form,
// what fsops.ExtractTar and the layer builder read).
const paxXattr = "SCHILY.xattr."

// userXattrs returns the user.* extended attributes of f (nil: none).
func userXattrs(f *os.File) map[string]string { return fsops.UserXattrsFd(int(f.Fd())) }

// mkdirOwned creates directory p and its missing parents (mode 0755) owned
// by uid:gid, as docker build creates a WORKDIR for the stage's USER and the
// destination directories of a COPY --chown; existing ones stay as they are.
func mkdirOwned(ctx context.Context, fsys session.FS, p string, uid, gid int) error {
	var missing []string
	for d := cleanAbs(p); d != "/"; d = path.Dir(d) {
		_, err := fsys.Stat(ctx, d)
		if err == nil {
			break
		}
		if !errdefs.Is(err, api.CodeNotFound) {
			return err
		}
		missing = append(missing, d)
	}
	if len(missing) == 0 {
		return nil
	}
	slices.Reverse(missing)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range missing {
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, Uid: uid, Gid: gid, ModTime: time.Now()}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return fsys.ExtractTar(ctx, "/", &buf)
}

// unpack extracts the archive rel of the context (kind, archiveKind's) into
// directory dest, its entries' owners and modes as the archive has them.
func (r *run) unpack(ctx context.Context, fsys session.FS, root *contextRoot, rel, kind, dest string) error {
	f, err := root.Open(rel)
	if err != nil {
		return err
	}
	defer f.Close()
	tr, err := decompress(kind, bufio.NewReaderSize(f, 1<<16))
	if err != nil {
		return err
	}
	if err := mkdirOwned(ctx, fsys, dest, 0, 0); err != nil {
		return err
	}
	return fsys.ExtractTar(ctx, dest, tr)
}

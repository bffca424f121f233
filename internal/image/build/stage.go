package build

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// stageRef finds the earlier stage COPY --from names (its name or index).
func (r *run) stageRef(from string, line int) (*state, error) {
	if st, ok := r.built[strings.ToLower(from)]; ok {
		return st, nil
	}
	if i, err := strconv.Atoi(from); err == nil && i >= 0 && i < len(r.order) {
		return r.order[i], nil
	}
	return nil, lineError(line, "COPY --from=%s: no earlier stage of that name or index (images as --from are not supported)", from)
}

// copyFromStage copies paths of an earlier stage's file system: a sandbox of
// that stage writes each as a tar, renamed to its destination, owned by root
// (or --chown), into the step's sandbox.
func (r *run) copyFromStage(ctx context.Context, st *state, spec copySpec, from string, step *api.BuildStep) error {
	line := step.Line
	switch {
	case len(spec.exclude) > 0 || spec.parents || len(spec.sd.SourceContents) > 0:
		return lineError(line, "COPY --from with --exclude, --parents or a heredoc is not supported")
	}
	src, err := r.stageRef(from, line)
	if err != nil {
		return err
	}
	var paths []string
	for _, p := range spec.sd.SourcePaths {
		paths = append(paths, joinPath(src.workdir(), p))
	}
	dest := spec.sd.DestPath
	destDir := strings.HasSuffix(dest, "/") || dest == "." || strings.HasSuffix(dest, "/.")
	dest = joinPath(st.workdir(), dest)
	if len(paths) > 1 && !destDir {
		return lineError(line, "COPY with several sources: the destination %q must be a directory ending in /", spec.sd.DestPath)
	}
	mode, err := parseChmod(spec.chmod)
	if err != nil {
		return lineError(line, "COPY --chmod=%s: %v", spec.chmod, err)
	}
	key := st.chain("COPY --from", fmt.Sprintf("%x", src.key), strings.Join(paths, "\x00"), dest, fmt.Sprint(destDir),
		"--chown="+spec.chown, "--chmod="+spec.chmod)
	return r.layerStep(ctx, st, key, step, func(ctx context.Context, w workspace) error {
		srcFS, err := r.stageFS(ctx, src, from, line)
		if err != nil {
			return err
		}
		defer srcFS.Close()
		dstFS, err := w.fs(ctx)
		if err != nil {
			return err
		}
		defer dstFS.Close()
		uid, gid, err := chown(ctx, dstFS, spec.chown)
		if err != nil {
			return lineError(line, "COPY --chown=%s: %v", spec.chown, err)
		}
		var srcs []string // paths with their wildcards expanded
		for _, p := range paths {
			if !strings.ContainsAny(p, "*?[") {
				srcs = append(srcs, p)
				continue
			}
			m, err := globFS(ctx, srcFS, p)
			if err != nil {
				return lineError(line, "COPY --from=%s %s: %v", from, p, err)
			}
			if len(m) == 0 {
				return lineError(line, "COPY --from=%s %s: no file in that stage matches", from, p)
			}
			srcs = append(srcs, m...)
		}
		if len(srcs) > 1 && !destDir {
			return lineError(line, "COPY with several sources: the destination %q must be a directory ending in /", spec.sd.DestPath)
		}
		for _, p := range srcs {
			fi, err := srcFS.Stat(ctx, p)
			if err != nil {
				if errdefs.Is(err, api.CodeNotFound) {
					return lineError(line, "COPY --from=%s %s: not found in that stage", from, p)
				}
				return err
			}
			dir, prefix := dest, ""
			if fi.Type != "dir" {
				if dfi, serr := dstFS.Stat(ctx, dest); destDir || serr == nil && dfi.Type == "dir" {
					prefix = path.Base(p)
				} else {
					dir, prefix = path.Dir(dest), path.Base(dest)
				}
			}
			if err := mkdirOwned(ctx, dstFS, dir, uid, gid); err != nil {
				return fmt.Errorf("Dockerfile line %d: COPY: create %s: %w", line, dir, err)
			}
			// WriteTar names entries from p's base name ("" for "/").
			base := path.Base(p)
			if p == "/" {
				base = ""
			}
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(srcFS.WriteTar(ctx, p, pw)) }()
			rr, rw := io.Pipe()
			go func() { rw.CloseWithError(renameTar(pr, rw, base, prefix, uid, gid, int64(mode))) }()
			err = dstFS.ExtractTar(ctx, dir, rr)
			rr.CloseWithError(io.ErrClosedPipe)
			pr.CloseWithError(io.ErrClosedPipe)
			if err != nil {
				return fmt.Errorf("Dockerfile line %d: COPY --from=%s %s: %w", line, from, p, err)
			}
		}
		return nil
	})
}

// globFS returns the paths of fsys that pattern (absolute, path.Match
// wildcards in any component) matches, sorted.
func globFS(ctx context.Context, fsys session.FS, pattern string) ([]string, error) {
	cur := []string{"/"}
	for _, part := range strings.Split(strings.TrimPrefix(pattern, "/"), "/") {
		var next []string
		for _, dir := range cur {
			if !strings.ContainsAny(part, "*?[") {
				if p := path.Join(dir, part); p != dir {
					if _, err := fsys.Stat(ctx, p); err == nil {
						next = append(next, p)
					}
				}
				continue
			}
			ents, err := fsys.List(ctx, dir)
			if err != nil {
				continue // not a directory: nothing below it matches
			}
			for _, e := range ents {
				ok, err := path.Match(part, e.Name)
				if err != nil {
					return nil, err
				}
				if ok {
					next = append(next, path.Join(dir, e.Name))
				}
			}
		}
		cur = next
	}
	slices.Sort(cur)
	return cur, nil
}

// renameTar copies a tar, renaming entry base (and base/...) to prefix (and
// prefix/...), owners set to uid:gid and, if mode is set, the mode of every
// entry but symlinks; hard link targets are renamed alike.
func renameTar(r io.Reader, w io.Writer, base, prefix string, uid, gid int, mode int64) error {
	tr, tw := tar.NewReader(r), tar.NewWriter(w)
	rename := func(n string) (string, bool) {
		n = strings.TrimSuffix(n, "/")
		switch {
		case base == "":
			return path.Join(prefix, n), true
		case n == base:
			return prefix, true
		case strings.HasPrefix(n, base+"/"):
			return path.Join(prefix, strings.TrimPrefix(n, base+"/")), true
		}
		return "", false
	}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return tw.Close()
		}
		if err != nil {
			return err
		}
		name, ok := rename(hdr.Name)
		if !ok || name == "" {
			continue // the directory itself: its contents go into the destination
		}
		if hdr.Typeflag == tar.TypeLink {
			if hdr.Linkname, ok = rename(hdr.Linkname); !ok {
				continue
			}
		}
		if hdr.Typeflag == tar.TypeDir {
			name += "/"
		}
		hdr.Name, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = name, uid, gid, "", ""
		if mode != 0 && hdr.Typeflag != tar.TypeSymlink {
			hdr.Mode = mode
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

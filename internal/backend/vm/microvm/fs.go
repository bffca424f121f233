package microvm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/backend/initproto"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// vmFS is session.FS through the guest agent: every path is a path in the
// guest, where the agent runs as root; the guest is the sandbox, so there is
// no host path to escape to. Tar archives are made and unpacked by the
// guest's own tar.
type vmFS struct{ in *instance }

// clean makes p an absolute guest path, refusing empty paths and NUL.
func clean(p string) (string, error) {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return "", errdefs.Invalid("bad path %q", p)
	}
	return path.Clean("/" + p), nil
}

func (f *vmFS) Close() error { return nil }

// do runs one file request; a paused VM is let run (its processes stay
// frozen in the guest) for the request's duration.
func (f *vmFS) do(ctx context.Context, op string, p *initproto.Packet) (*initproto.Packet, error) {
	var r *initproto.Packet
	err := f.in.thawed(ctx, func() error {
		var err error
		r, err = f.in.call(ctx, p)
		return err
	})
	return r, err
}

func fileInfo(p string, r *initproto.Packet) (api.FileInfo, error) {
	if r.Op != "STAT" {
		return api.FileInfo{}, replyErr("stat "+p, r)
	}
	mode, _ := r.Int("mode")
	size, _ := r.Int("size")
	uid, _ := r.Int("uid")
	gid, _ := r.Int("gid")
	mt, _ := r.Get("mtime")
	link, _ := r.Get("link")
	return infoOf(p, uint32(mode), size, mt, int(uid), int(gid), link), nil
}

func infoOf(p string, mode uint32, size int64, mtime string, uid, gid int, link string) api.FileInfo {
	typ := "other"
	switch mode & 0o170000 {
	case 0o100000:
		typ = "file"
	case 0o040000:
		typ = "dir"
	case 0o120000:
		typ = "symlink"
	}
	sec, ns, _ := strings.Cut(mtime, ".")
	s, _ := strconv.ParseInt(sec, 10, 64)
	n, _ := strconv.ParseInt(ns, 10, 64)
	return api.FileInfo{Name: path.Base(p), Path: p, Size: size, Mode: mode & 0o7777, Type: typ,
		ModTime: time.Unix(s, n).UTC(), Link: link, UID: uid, GID: gid}
}

func (f *vmFS) Stat(ctx context.Context, p string) (api.FileInfo, error) {
	p, err := clean(p)
	if err != nil {
		return api.FileInfo{}, err
	}
	r, err := f.do(ctx, "stat", initproto.NewPacket("STAT").Add("path", p))
	if err != nil {
		return api.FileInfo{}, err
	}
	return fileInfo(p, r)
}

func (f *vmFS) List(ctx context.Context, p string) ([]api.FileInfo, error) {
	p, err := clean(p)
	if err != nil {
		return nil, err
	}
	var out []api.FileInfo
	err = f.in.thawed(ctx, func() error {
		ch, err := f.in.channel(ctx)
		if err != nil {
			return err
		}
		defer ch.Close()
		r, err := ch.Call(ctx, initproto.NewPacket("LIST").Add("path", p))
		for {
			if err != nil {
				return f.in.connErr(err)
			}
			if r.Op != "LIST" {
				return replyErr("list "+p, r)
			}
			for _, e := range r.All("ent") {
				fi, ok := parseEnt(p, e)
				if !ok {
					return errdefs.Internal(errors.New("bad entry "+strconv.Quote(e)), "microvm: list")
				}
				out = append(out, fi)
			}
			if v, _ := r.Get("more"); v != "1" {
				return nil
			}
			r, err = ch.Reply(ctx)
		}
	})
	return out, err
}

// parseEnt reads MODE:SIZE:MTIME:UID:GID:LINKLEN:LINK NAME.
func parseEnt(dir, e string) (api.FileInfo, bool) {
	parts := strings.SplitN(e, ":", 7)
	if len(parts) != 7 {
		return api.FileInfo{}, false
	}
	var n [5]int64
	for i, k := range []int{0, 1, 3, 4, 5} {
		v, err := strconv.ParseInt(parts[k], 10, 64)
		if err != nil {
			return api.FileInfo{}, false
		}
		n[i] = v
	}
	ll := int(n[4])
	if ll < 0 || ll > len(parts[6]) {
		return api.FileInfo{}, false
	}
	link, name := parts[6][:ll], parts[6][ll:]
	return infoOf(path.Join(dir, name), uint32(n[0]), n[1], parts[2], int(n[2]), int(n[3]), link), true
}

func (f *vmFS) Open(ctx context.Context, p string) (io.ReadCloser, api.FileInfo, error) {
	p, err := clean(p)
	if err != nil {
		return nil, api.FileInfo{}, err
	}
	var rc io.ReadCloser
	var fi api.FileInfo
	err = f.in.thawed(ctx, func() error {
		ch, err := f.in.channel(ctx)
		if err != nil {
			return err
		}
		r, err := ch.Call(ctx, initproto.NewPacket("READ").Add("path", p))
		if err != nil {
			ch.Close()
			return f.in.connErr(err)
		}
		if fi, err = fileInfo(p, r); err != nil {
			ch.Close()
			return err
		}
		// The agent sends the whole file at once: buffer it, so a paused VM
		// can stop again and a slow reader holds nothing in the guest.
		var b bytes.Buffer
		_, err = io.Copy(&b, ch.Stream(1))
		ch.Close()
		if err != nil {
			return f.in.connErr(err)
		}
		rc = io.NopCloser(&b)
		return nil
	})
	return rc, fi, err
}

func (f *vmFS) WriteFile(ctx context.Context, p string, mode os.FileMode, r io.Reader, max int64) (api.FileInfo, error) {
	p, err := clean(p)
	if err != nil {
		return api.FileInfo{}, err
	}
	if mode == 0 {
		mode = 0o644
	}
	var fi api.FileInfo
	err = f.in.thawed(ctx, func() error {
		ch, err := f.in.channel(ctx)
		if err != nil {
			return err
		}
		defer ch.Close()
		rep, err := ch.Call(ctx, initproto.NewPacket("WRITE").Add("path", p).
			Add("mode", strconv.FormatUint(uint64(mode.Perm()), 10)).Add("max", strconv.FormatInt(max, 10)))
		if err != nil {
			return f.in.connErr(err)
		}
		if rep.Op != "OK" {
			return replyErr("write "+p, rep)
		}
		src := r
		if max > 0 {
			src = io.LimitReader(r, max+1)
		}
		n, err := io.Copy(ch, src)
		if err != nil {
			return errdefs.Wrap(api.CodeInvalidArgument, err, "write %s: reading the upload", p)
		}
		if max > 0 && n > max {
			return errdefs.New(api.CodePayloadTooLarge, "write %s: more than %d bytes", p, max)
		}
		if err := ch.CloseWrite(); err != nil {
			return f.in.connErr(err)
		}
		rep, err = ch.Reply(ctx)
		if err != nil {
			return f.in.connErr(err)
		}
		fi, err = fileInfo(p, rep)
		return err
	})
	return fi, err
}

func (f *vmFS) Mkdir(ctx context.Context, p string, mode os.FileMode, parents bool) (api.FileInfo, error) {
	p, err := clean(p)
	if err != nil {
		return api.FileInfo{}, err
	}
	if mode == 0 {
		mode = 0o755
	}
	pk := initproto.NewPacket("MKDIR").Add("path", p).Add("mode", strconv.FormatUint(uint64(mode.Perm()), 10))
	if parents {
		pk.Add("parents", "1")
	}
	r, err := f.do(ctx, "mkdir", pk)
	if err != nil {
		return api.FileInfo{}, err
	}
	return fileInfo(p, r)
}

func (f *vmFS) Remove(ctx context.Context, p string, recursive bool) error {
	p, err := clean(p)
	if err != nil {
		return err
	}
	if p == "/" {
		return errdefs.Invalid("cannot remove /")
	}
	pk := initproto.NewPacket("REMOVE").Add("path", p)
	if recursive {
		pk.Add("recursive", "1")
	}
	r, err := f.do(ctx, "remove", pk)
	if err != nil {
		return err
	}
	if r.Op != "OK" {
		return replyErr("remove "+p, r)
	}
	return nil
}

func (f *vmFS) Rename(ctx context.Context, from, to string) error {
	from, err := clean(from)
	if err != nil {
		return err
	}
	if to, err = clean(to); err != nil {
		return err
	}
	r, err := f.do(ctx, "rename", initproto.NewPacket("RENAME").Add("path", from).Add("to", to))
	if err != nil {
		return err
	}
	if r.Op != "OK" {
		return replyErr("rename "+from, r)
	}
	return nil
}

// tar runs the guest's tar with stdin/stdout streams.
func (f *vmFS) tar(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	return f.in.thawed(ctx, func() error {
		var stderr bytes.Buffer
		pr, err := f.in.Exec(ctx, driver.ProcSpec{Args: args, Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, Cwd: "/"},
			driver.Stdio{Stdin: in, Stdout: out, Stderr: &stderr})
		if err != nil {
			return err
		}
		defer pr.Close()
		ex, err := pr.Wait(ctx)
		if err != nil {
			return err
		}
		if ex.StartErr != "" {
			return errdefs.New(api.CodeNotImplemented, "the image has no tar: %s", ex.StartErr)
		}
		if ex.Code != 0 {
			msg := strings.TrimSpace(stderr.String())
			if strings.Contains(msg, "No such file") || strings.Contains(msg, "can't") {
				return errdefs.New(api.CodeNotFound, "tar: %s", msg)
			}
			return errdefs.New(api.CodeInvalidArgument, "tar: %s", msg)
		}
		return nil
	})
}

func (f *vmFS) WriteTar(ctx context.Context, p string, w io.Writer) error {
	p, err := clean(p)
	if err != nil {
		return err
	}
	if _, err := f.Stat(ctx, p); err != nil {
		return err
	}
	dir, base := path.Split(p)
	if p == "/" {
		dir, base = "/", "."
	}
	return f.tar(ctx, []string{"tar", "-C", dir, "-cf", "-", base}, nil, w)
}

func (f *vmFS) ExtractTar(ctx context.Context, p string, r io.Reader) error {
	p, err := clean(p)
	if err != nil {
		return err
	}
	fi, err := f.Stat(ctx, p)
	if err != nil {
		return err
	}
	if fi.Type != "dir" {
		return errdefs.Invalid("extract into %s: not a directory", p)
	}
	return f.tar(ctx, []string{"tar", "-C", p, "-xf", "-"}, r, nil)
}

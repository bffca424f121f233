package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dsec-dev/dsec/internal/localtar"
	"github.com/dsec-dev/dsec/pkg/client"
)

// remotePath splits "ID:/path"; a local path has no colon before its first slash.
func remotePath(s string) (id, p string, ok bool) {
	i := strings.IndexByte(s, ':')
	if i <= 0 || strings.Contains(s[:i], "/") {
		return "", s, false
	}
	return s[:i], s[i+1:], true
}

func cpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files or directories between the host and a sandbox (ID:/path on one side)",
		Long: `Copy a file or directory into or out of a sandbox. One side is ID:/path.
  dsec cp ./src sb-123:/work/src     upload (a directory goes as a tar stream)
  dsec cp sb-123:/work/out.txt .     download (a directory is unpacked locally)`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			sid, sp, sRemote := remotePath(args[0])
			did, dp, dRemote := remotePath(args[1])
			if sRemote == dRemote {
				return errors.New("exactly one of SRC and DST must be ID:/path")
			}
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if dRemote {
				fi, err := os.Stat(sp)
				if err != nil {
					return err
				}
				if !fi.IsDir() {
					f, err := os.Open(sp)
					if err != nil {
						return err
					}
					defer f.Close()
					target := dp
					if st, err := cl.Stat(ctx, did, dp); err == nil && st.Type == "dir" {
						target = strings.TrimRight(dp, "/") + "/" + filepath.Base(sp)
					}
					_, err = cl.WriteFile(ctx, did, target, uint32(fi.Mode().Perm()), f)
					return err
				}
				pr, pw := io.Pipe()
				go func() { pw.CloseWithError(localtar.Write(sp, pw)) }()
				return cl.UploadTar(ctx, did, dp, pr)
			}
			st, err := cl.Stat(ctx, sid, sp)
			if err != nil {
				return err
			}
			if st.Type != "dir" {
				target := dp
				if fi, err := os.Stat(dp); err == nil && fi.IsDir() {
					target = filepath.Join(dp, st.Name)
				}
				rc, err := cl.ReadFile(ctx, sid, sp)
				if err != nil {
					return err
				}
				defer rc.Close()
				f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fs.FileMode(st.Mode&0o777))
				if err != nil {
					return err
				}
				if _, err := io.Copy(f, rc); err != nil {
					f.Close()
					return err
				}
				return f.Close()
			}
			rc, err := cl.DownloadTar(ctx, sid, sp)
			if err != nil {
				return err
			}
			defer rc.Close()
			if err := os.MkdirAll(dp, 0o755); err != nil {
				return err
			}
			return extractLocalTar(dp, rc)
		},
	}
}

// extractLocalTar unpacks a tar under dir through os.Root, which keeps every name
// (and every symlink) inside dir.
func extractLocalTar(dir string, r io.Reader) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(filepath.FromSlash(hdr.Name))
		if d := filepath.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, fs.FileMode(hdr.Mode&0o777)|0o700); err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
		case tar.TypeReg:
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fs.FileMode(hdr.Mode&0o777))
			if err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			_ = root.Remove(name)
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
		}
	}
}

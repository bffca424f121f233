package microvm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// layerCache converts directory layers into EROFS images once (mkfs.erofs),
// keyed by the directory's path, inode and change time, and shares them
// between VMs; the host page cache then holds one copy of each layer.
type layerCache struct {
	dir string
	mu  sync.Mutex
	inf map[string]*sync.Mutex
}

// image returns an EROFS image file for l.
func (c *layerCache) image(ctx context.Context, l driver.Layer) (string, error) {
	switch l.Kind {
	case driver.LayerEROFS:
		if _, err := os.Stat(l.Path); err != nil {
			return "", errdefs.Wrap(errCode(err), err, "microvm: layer")
		}
		return l.Path, nil
	case driver.LayerDir:
	default:
		return "", errdefs.Invalid("microvm: layer kind %q is not supported (have %s, %s)", l.Kind, driver.LayerDir, driver.LayerEROFS)
	}
	fi, err := os.Stat(l.Path)
	if err != nil {
		return "", errdefs.Wrap(errCode(err), err, "microvm: layer")
	}
	if !fi.IsDir() {
		return "", errdefs.Invalid("microvm: layer %s is not a directory", l.Path)
	}
	st := fi.Sys().(*syscall.Stat_t)
	key := sha256.Sum256([]byte(l.Path + "\x00" + strconv.FormatUint(st.Ino, 10) + "\x00" +
		strconv.FormatInt(st.Ctim.Nano(), 10) + "\x00" + strconv.FormatInt(fi.ModTime().UnixNano(), 10)))
	out := filepath.Join(c.dir, hex.EncodeToString(key[:12])+".erofs")
	c.mu.Lock()
	if c.inf == nil {
		c.inf = map[string]*sync.Mutex{}
	}
	m := c.inf[out]
	if m == nil {
		m = &sync.Mutex{}
		c.inf[out] = m
	}
	c.mu.Unlock()
	m.Lock()
	defer m.Unlock()
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return "", errdefs.Internal(err, "microvm: layer cache")
	}
	tmp := fmt.Sprintf("%s.tmp%d", out, os.Getpid())
	if b, err := exec.CommandContext(ctx, "mkfs.erofs", tmp, l.Path).CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", errdefs.Internal(err, "microvm: mkfs.erofs %s: %s", l.Path, b)
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", errdefs.Internal(err, "microvm: layer cache")
	}
	return out, nil
}

// errCode classifies a layer that cannot be opened: missing is not_found.
func errCode(err error) api.Code {
	if errors.Is(err, fs.ErrNotExist) {
		return api.CodeNotFound
	}
	return api.CodeInternal
}

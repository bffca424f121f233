// Package damontest is a fake of the kernel's DAMON sysfs interface on a temp
// dir, for testing reclaim.DAMON without touching /sys/kernel/mm/damon.
package damontest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/reclaim"
)

// Fake imitates the kernel's DAMON sysfs interface on a temp dir: writing
// nr_kdamonds, nr_contexts, nr_targets or nr_schemes recreates the numbered
// child directories with their files, "on" in a kdamond's state starts it (a
// pid appears), and nr_kdamonds cannot change while one runs (EBUSY). Nothing
// here touches the real /sys/kernel/mm/damon.
type Fake struct {
	t *testing.T
	// Root is the fake sysfs root (the DAMON "admin" directory).
	Root string
	// Writes lists every write as "relative/path=value".
	Writes []string
}

// New makes a fake tree with kdamonds kdamonds (someone else's when > 0).
func New(t *testing.T, kdamonds int) *Fake {
	f := &Fake{t: t, Root: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(f.Root, "kdamonds"), 0o755); err != nil {
		t.Fatal(err)
	}
	f.put(filepath.Join(f.Root, "kdamonds", "nr_kdamonds"), "0")
	if kdamonds > 0 {
		if err := f.Write(filepath.Join(f.Root, "kdamonds", "nr_kdamonds"), strconv.Itoa(kdamonds)); err != nil {
			t.Fatal(err)
		}
		f.Writes = nil
	}
	return f
}

func (f *Fake) put(p, v string) {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// Read implements reclaim.DAMONFS.
func (f *Fake) Read(p string) (string, error) { return reclaim.OSFS{}.Read(p) }

var errBusy = errors.New("device or resource busy")

// Write implements reclaim.DAMONFS like the kernel would.
func (f *Fake) Write(p, v string) error {
	if _, err := os.Stat(p); err != nil {
		return err // the kernel has no such file either
	}
	rel, _ := filepath.Rel(f.Root, p)
	f.Writes = append(f.Writes, rel+"="+v)
	dir, name := filepath.Dir(p), filepath.Base(p)
	if strings.HasPrefix(name, "nr_") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return errors.New("invalid argument")
		}
		if name == "nr_kdamonds" {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if st, _ := f.Read(filepath.Join(dir, e.Name(), "state")); st == "on" {
					return errBusy
				}
			}
		}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() {
				os.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
		for i := range n {
			f.populate(filepath.Join(dir, strconv.Itoa(i)), name)
		}
	}
	if name == "state" {
		switch v {
		case "on":
			f.put(filepath.Join(dir, "pid"), "4242")
		case "off":
			f.put(filepath.Join(dir, "pid"), "-1")
		default:
			return errors.New("invalid argument")
		}
	}
	f.put(p, v)
	return nil
}

func (f *Fake) populate(d, kind string) {
	switch kind {
	case "nr_kdamonds":
		f.put(filepath.Join(d, "state"), "off")
		f.put(filepath.Join(d, "pid"), "-1")
		f.put(filepath.Join(d, "contexts", "nr_contexts"), "0")
	case "nr_contexts":
		f.put(filepath.Join(d, "operations"), "vaddr")
		for _, x := range []string{"sample_us", "aggr_us", "update_us"} {
			f.put(filepath.Join(d, "monitoring_attrs", "intervals", x), "0")
		}
		f.put(filepath.Join(d, "targets", "nr_targets"), "0")
		f.put(filepath.Join(d, "schemes", "nr_schemes"), "0")
	case "nr_targets":
		f.put(filepath.Join(d, "pid_target"), "0")
	case "nr_schemes":
		f.put(filepath.Join(d, "action"), "stat")
		for _, x := range []string{"sz", "nr_accesses", "age"} {
			f.put(filepath.Join(d, "access_pattern", x, "min"), "0")
			f.put(filepath.Join(d, "access_pattern", x, "max"), "0")
		}
		for _, x := range []string{"ms", "bytes", "reset_interval_ms"} {
			f.put(filepath.Join(d, "quotas", x), "0")
		}
	}
}

// Get reads a file by its path relative to Root.
func (f *Fake) Get(t *testing.T, rel string) string {
	t.Helper()
	v, err := f.Read(filepath.Join(f.Root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

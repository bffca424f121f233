package session

import (
	"context"
	"path"
	"sort"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Directory watches compare listings: FS has no change notification. A new
// name is a create (and a write when it has content), a gone one a remove, a
// changed size or modification time a write, a changed mode a chmod. Two
// writes within one modification-time tick that keep the size are one event or
// none; renames show as remove + create.

// DirSnapshot maps names relative to a watched directory to what a watch
// compares.
type DirSnapshot map[string]api.FileInfo

// ScanDir lists dir (the whole tree when recursive), at most max entries
// (resource_exhausted beyond).
func ScanDir(ctx context.Context, fs FS, dir string, recursive bool, max int) (DirSnapshot, error) {
	s := DirSnapshot{}
	var walk func(rel string) error
	walk = func(rel string) error {
		list, err := fs.List(ctx, path.Join(dir, rel))
		if err != nil {
			if rel != "" && errdefs.Is(err, api.CodeNotFound) {
				return nil // removed while listing
			}
			return err
		}
		for _, fi := range list {
			if len(s) >= max {
				return errdefs.New(api.CodeResourceExhausted, "more than %d entries under %s", max, dir)
			}
			name := path.Join(rel, fi.Name)
			s[name] = fi
			if recursive && fi.Type == "dir" {
				if err := walk(name); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return s, walk("")
}

// DiffDir returns the changes from old to cur, by name.
func DiffDir(old, cur DirSnapshot) []api.WatchEvent {
	names := make([]string, 0, len(cur)+len(old))
	for n := range cur {
		names = append(names, n)
	}
	for n := range old {
		if _, ok := cur[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var evs []api.WatchEvent
	add := func(name, op string, fi *api.FileInfo) {
		evs = append(evs, api.WatchEvent{Name: name, Op: op, Entry: fi})
	}
	for _, n := range names {
		was, had := old[n]
		st, has := cur[n]
		switch {
		case !had:
			add(n, api.WatchCreate, &st)
			if st.Type == "file" && st.Size > 0 {
				add(n, api.WatchWrite, &st)
			}
		case !has:
			add(n, api.WatchRemove, nil)
		default:
			if was.Type == "file" && (was.Size != st.Size || !was.ModTime.Equal(st.ModTime)) {
				add(n, api.WatchWrite, &st)
			}
			if was.Mode != st.Mode {
				add(n, api.WatchChmod, &st)
			}
		}
	}
	return evs
}

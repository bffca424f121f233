// Package datafmt versions what dsec keeps on disk and in the cluster store,
// so that an upgrade never loses data silently. Each store has a current
// format number; a reader meets a format that is
//   - the current one: it reads it;
//   - older and still readable: it reads it (and may rewrite it in the current
//     form);
//   - newer than it knows (written by a later dsec): it refuses with an error
//     naming the format, the version that wrote it and what to do, and never
//     rewrites or deletes it.
//
// The node data directory carries a marker file (format.json); sandbox records,
// environment manifests, the trajectory store and the project store carry
// their own numbers.
package datafmt

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
)

// Formats this build writes and reads.
const (
	// NodeDir is the layout of a node's data directory (what lives where).
	NodeDir = 1
	// Record is a sandbox record (DATA_DIR/sandboxes/ID.json).
	Record = 1
	// Projects is a node's project store (DATA_DIR/projects.json).
	Projects = 1
	// Trajectories is the trajectory store (DATA_DIR/trajectories.db).
	Trajectories = 1
	// Cluster is the layout of a cluster's keys in etcd.
	Cluster = 1
)

// ErrNewer is wrapped by every refusal of a format newer than this build's.
var ErrNewer = errors.New("written by a newer dsec")

// Newer is the refusal of what (e.g. "sandbox record x.json") in format have
// when this build reads up to current.
func Newer(what string, have, current int) error {
	return fmt.Errorf("%s has format %d, %w (this one reads up to %d): run that dsec or a later one on it", what, have, ErrNewer, current)
}

// CheckNumber checks a format stored as a decimal number (raw) for what: a
// later format than current is refused (Newer), and so is a value that is no
// number.
func CheckNumber(what string, raw []byte, current int) error {
	have, err := strconv.Atoi(string(raw))
	if err != nil || have < 1 {
		return fmt.Errorf("%s: its format holds %q, not a format number", what, raw)
	}
	if have > current {
		return Newer(what, have, current)
	}
	return nil
}

// Marker is the content of a data directory's format.json.
type Marker struct {
	Format    int    `json:"format"`
	WrittenBy string `json:"written_by,omitempty"`
}

// MarkerFile is the name of the marker in a data directory.
const MarkerFile = "format.json"

// CheckDir checks the marker of the data directory dir against current: a
// directory without one (new, or written before markers existed, whose layout
// is format 1) gets one; a newer format is refused (ErrNewer) and left as it is.
func CheckDir(dir string, current int) error {
	p := filepath.Join(dir, MarkerFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return writeMarker(p, current)
	}
	if err != nil {
		return fmt.Errorf("data dir format: %w", err)
	}
	var m Marker
	if err := json.Unmarshal(b, &m); err != nil || m.Format < 1 {
		return fmt.Errorf("data dir %s: unreadable %s (%q): fix or remove it if the directory is a dsec data dir", dir, MarkerFile, b)
	}
	if m.Format > current {
		by := ""
		if m.WrittenBy != "" {
			by = " (" + m.WrittenBy + ")"
		}
		return Newer("data dir "+dir+by, m.Format, current)
	}
	if m.Format < current {
		// No older layout exists yet; a future one migrates here, in place,
		// before writing the new marker.
		return writeMarker(p, current)
	}
	return nil
}

func writeMarker(p string, format int) error {
	b, _ := json.Marshal(Marker{Format: format, WrittenBy: Build()})
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("data dir format: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("data dir format: %w", err)
	}
	return nil
}

// Build names this binary: "dsec REVISION" when the build recorded one.
func Build() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "dsec " + s.Value[:12]
			}
		}
	}
	return "dsec"
}

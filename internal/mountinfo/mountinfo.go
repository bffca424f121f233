// Package mountinfo reads a mount namespace's mount table from
// /proc/PID/mountinfo (proc_pid_mountinfo(5)): each mount's point, options,
// file system type, source and super options.
package mountinfo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Self is the mount table of the calling process's mount namespace.
const Self = "/proc/self/mountinfo"

// Mount is one line of a mountinfo file.
type Mount struct {
	ID     int
	Dev    string // major:minor
	Point  string // unescaped
	Opts   string // per-mount options: rw,nosuid,...
	FSType string
	Source string
	Supers string // super block options
}

// Read parses the mountinfo file at path (Self: this process's).
func Read(path string) ([]Mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	defer f.Close()
	return Parse(f)
}

// Parse parses mountinfo text; lines it cannot read are skipped.
func Parse(r io.Reader) ([]Mount, error) {
	var ms []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT POINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPERS
		fs := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(fs); i++ {
			if fs[i] == "-" {
				sep = i
				break
			}
		}
		if len(fs) < 6 || sep < 0 || len(fs) < sep+3 {
			continue
		}
		id, _ := strconv.Atoi(fs[0])
		ms = append(ms, Mount{
			ID: id, Dev: fs[2], Point: Unescape(fs[4]), Opts: fs[5],
			FSType: fs[sep+1], Source: fs[sep+2], Supers: strings.Join(fs[sep+3:], " "),
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mountinfo: read: %w", err)
	}
	return ms, nil
}

// On returns the mounts stacked on point in this process's mount namespace,
// bottom first.
func On(point string) ([]Mount, error) {
	ms, err := Read(Self)
	if err != nil {
		return nil, err
	}
	var on []Mount
	for _, m := range ms {
		if m.Point == point {
			on = append(on, m)
		}
	}
	return on, nil
}

// Top returns the last (top) mount on point in this process's mount
// namespace, or nil when nothing is mounted there.
func Top(point string) (*Mount, error) {
	on, err := On(point)
	if err != nil || len(on) == 0 {
		return nil, err
	}
	return &on[len(on)-1], nil
}

// HasOpt reports whether the comma-separated options opts hold want.
func HasOpt(opts, want string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// Unescape undoes the octal escapes (\040 for a space, etc.) of mountinfo
// paths.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

package netpolicy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/dsec-dev/dsec/pkg/api"
)

// record is what the Manager keeps on disk per egress sandbox, so a restarted
// agent knows its links, addresses and policies (the kernel objects
// themselves outlive the agent process).
type record struct {
	ID     string            `json:"id"`
	Link   string            `json:"link"`
	Host   netip.Addr        `json:"host"` // the node's end of the link
	Addr   netip.Addr        `json:"addr"` // the sandbox's end
	Policy api.NetworkPolicy `json:"policy"`
	// Entries is the policy as resolved when it was applied (rule sets may be
	// redefined when the server restarts; a running sandbox keeps what it got).
	Entries []string `json:"entries"`
}

func (r *record) link() link { return link{ifname: r.Link, host: r.Host, addr: r.Addr} }

func (r *record) entries() ([]Entry, error) {
	out := make([]Entry, 0, len(r.Entries))
	for _, s := range r.Entries {
		e, err := ParseEntry(s)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func entryStrings(es []Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.String()
	}
	return out
}

func (m *Manager) recordPath(id string) string {
	return filepath.Join(m.cfg.StateDir, id+".json")
}

func (m *Manager) saveRecord(r *record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	p := m.recordPath(r.ID)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

func (m *Manager) removeRecord(id string) error {
	if err := os.Remove(m.recordPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// loadRecords reads every record in the state dir.
func (m *Manager) loadRecords() ([]*record, error) {
	ents, err := os.ReadDir(m.cfg.StateDir)
	if err != nil {
		return nil, err
	}
	var out []*record
	for _, e := range ents {
		name := e.Name()
		if strings.HasSuffix(name, ".tmp") {
			_ = os.Remove(filepath.Join(m.cfg.StateDir, name))
			continue
		}
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.cfg.StateDir, name))
		if err != nil {
			return nil, err
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil || r.ID+".json" != name {
			return nil, fmt.Errorf("netpolicy: bad record %s: %v", name, err)
		}
		out = append(out, &r)
	}
	return out, nil
}

// validID keeps sandbox IDs usable as file names.
func validID(id string) bool {
	return id != "" && len(id) <= 128 && !strings.ContainsAny(id, "/\x00") && id != "." && id != ".."
}

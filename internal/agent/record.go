package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/driver"
	"github.com/dsec-dev/dsec/internal/datafmt"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/pkg/api"
)

// record is what the agent keeps on disk per sandbox: enough to re-adopt it.
type record struct {
	// Version is the record's format (datafmt.Record); a record of a later
	// format is left for the dsec that wrote it.
	Version int    `json:"version"`
	ID      string `json:"id"`
	Backend string `json:"backend"`
	Image   string `json:"image"`
	// ImageRef and ImageDigest: an image named by registry reference, the
	// normalised reference and the digest it resolved to at create (a fork
	// or commit uses that digest, wherever the tag has moved since).
	ImageRef           string            `json:"image_ref,omitempty"`
	ImageDigest        string            `json:"image_digest,omitempty"`
	Spec               driver.Spec       `json:"spec"`
	CreatedAt          time.Time         `json:"created_at"`
	TTLSeconds         int64             `json:"ttl_seconds,omitempty"`
	IdleTimeoutSeconds int64             `json:"idle_timeout_seconds,omitempty"`
	Env                map[string]string `json:"env,omitempty"`
	Labels             map[string]string `json:"labels,omitempty"`
	RequestID          string            `json:"request_id,omitempty"`
	Paused             bool              `json:"paused,omitempty"`
	// Stopped: paused without memory (fspause.go): no init runs; the
	// writable layer's copy is the last of Spec.Layers (role "pause").
	Stopped bool `json:"stopped,omitempty"`
	// Reclaimed: memory was pushed out (pause with reclaim, idle reclaim);
	// resume prefetches it.
	Reclaimed   bool            `json:"reclaimed,omitempty"`
	DriverState json.RawMessage `json:"driver_state"`
	Procs       []procRecord    `json:"procs,omitempty"`
	NextProc    int             `json:"next_proc,omitempty"`
	// ImageConfig is the image's config at create (images.Config: default env,
	// cwd, user of every exec); a later rebase of the image does not change it.
	ImageConfig *image.Config `json:"image_config,omitempty"`

	// Network is the sandbox's egress policy, applied again on reset (nil:
	// loopback only).
	Network *api.NetworkPolicy `json:"network,omitempty"`

	// Deadline, when set, replaces CreatedAt+TTLSeconds (SetDeadline moved
	// it); OnExpiry is what happens at it (api.ExpiryDelete when empty).
	Deadline *time.Time `json:"deadline,omitempty"`
	OnExpiry string     `json:"on_expiry,omitempty"`

	// Start is the outcome of the create's start command (start.go).
	Start *api.StartStatus `json:"start,omitempty"`
}

// procRecord is a background process, kept so it can be re-attached.
type procRecord struct {
	ID        string    `json:"id"`
	PID       int       `json:"pid"`
	Cmd       []string  `json:"cmd"`
	StartedAt time.Time `json:"started_at"`
	TTY       bool      `json:"tty,omitempty"` // on a terminal (its output is pumped into the stdout log)
	// OpenStdin: started to take ProcessInput (the input does not survive a
	// restart of the agent); Labels as started.
	OpenStdin bool              `json:"open_stdin,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// saveRecord writes the record atomically (temp file + rename). No fsync: the
// records protect against an agent crash, not a host crash (which ends the
// sandboxes too), and an fsync per create would cost milliseconds.
func saveRecord(dir string, r *record) error {
	r.Version = datafmt.Record
	return writeRecordFile(dir, r.ID, r)
}

// writeRecordFile writes v as dir/ID.json (owner-only), atomically: a
// temporary name renamed, so a crash leaves the old record or the new one.
func writeRecordFile(dir, id string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+id+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, id+".json"))
}

func removeRecord(dir, id string) error {
	err := os.Remove(filepath.Join(dir, id+".json"))
	if os.IsNotExist(err) {
		return nil
	}
	return err
}

// loadRecords reads the records in dir. A record this build cannot read is
// named in held, with why: one of a later format is left as it is; one that
// is not a record is set aside as NAME.corrupt. Either way its sandbox, if it
// still runs, is not this agent's to release.
func loadRecords(dir string) (recs []*record, held map[string]error, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	held = map[string]error{}
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			_ = os.Remove(filepath.Join(dir, name)) // a write interrupted by a crash
			continue
		}
		id, ok := strings.CutSuffix(name, ".json")
		if !ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, nil, err
		}
		var r record
		err = json.Unmarshal(b, &r)
		switch {
		case err == nil && r.Version > datafmt.Record:
			held[id] = datafmt.Newer("sandbox record "+name, r.Version, datafmt.Record)
		case err == nil && r.ID == id:
			recs = append(recs, &r)
		default:
			// Not a record (nor one of a later format): keep the evidence
			// aside, so one bad record does not stop the agent from adopting
			// every other sandbox.
			if err == nil {
				err = fmt.Errorf("it names sandbox %q", r.ID)
			}
			held[id] = fmt.Errorf("sandbox record %s is not a record (kept as %s.corrupt): %w", name, name, err)
			_ = os.Rename(filepath.Join(dir, name), filepath.Join(dir, name+".corrupt"))
		}
	}
	return recs, held, nil
}

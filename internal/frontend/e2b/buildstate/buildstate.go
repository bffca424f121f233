// Package buildstate keeps the state of E2B template builds where every
// front end serving E2B's API reaches it: a build's record (status, reason,
// times, the process running it), its log entries, and the files the SDK
// uploads for its COPY steps. `dsec server` keeps them in its own memory
// and a temporary directory (Memory); a cluster's API servers keep them in
// etcd and the cluster's blob store (Etcd), so a status poll, a log read or
// an upload may reach any API server, and a build whose API server died is
// ended as an error by the next one that reads it.
package buildstate

import (
	"context"
	"io"
	"strconv"
	"time"

	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
)

// MaxLogEntries is the most log entries a build keeps: the entries after it
// are dropped, with one entry saying so, so the offsets the SDK polls with
// (logsOffset) stay those of the entries it read.
const MaxLogEntries = 10000

// Retention is how long a build's record, logs and uploaded files are kept.
const Retention = 24 * time.Hour

// Record is one build's state.
type Record struct {
	TemplateID string   `json:"templateID"`
	Tags       []string `json:"tags,omitempty"`
	// CPU and MemMB are the template's resources (0: the defaults).
	CPU   int32 `json:"cpu,omitempty"`
	MemMB int32 `json:"memMB,omitempty"`
	// Status is waiting until the steps arrive, building while they run,
	// then ready or error.
	Status e2bapi.TemplateBuildStatus `json:"status"`
	Reason *e2bapi.BuildStatusReason  `json:"reason,omitempty"`
	// Runner names the process that runs the build (once started).
	Runner  string    `json:"runner,omitempty"`
	Created time.Time `json:"created"`
	Started time.Time `json:"started,omitzero"`
	Ended   time.Time `json:"ended,omitzero"`
}

// Store keeps template builds. Its errors carry errdefs codes (not_found for
// an unknown build or files, conflict for a build started twice or ended
// already).
type Store interface {
	// Create records a new build (status waiting).
	Create(ctx context.Context, id string, r Record) error
	// Get returns a build's record. A build whose runner died before it
	// ended is ended here, as an error naming the runner.
	Get(ctx context.Context, id string) (Record, error)
	// Start marks a waiting build building, run by this process until
	// Finish (conflict when it started already).
	Start(ctx context.Context, id string) error
	// Log appends entries to the build's log.
	Log(ctx context.Context, id string, entries ...e2bapi.BuildLogEntry) error
	// Logs returns the build's log entries from offset on.
	Logs(ctx context.Context, id string, offset int) ([]e2bapi.BuildLogEntry, error)
	// Finish ends a building build with status (ready or error) and reason
	// (conflict when it ended already, e.g. as an orphan).
	Finish(ctx context.Context, id string, status e2bapi.TemplateBuildStatus, reason *e2bapi.BuildStatusReason) error
	// PutFiles stores the tar of a COPY step's files (size bytes of r) under
	// hash.
	PutFiles(ctx context.Context, hash string, r io.Reader, size int64) error
	// HasFiles says whether files are stored under hash.
	HasFiles(ctx context.Context, hash string) (bool, error)
	// OpenFiles reads the tar stored under hash.
	OpenFiles(ctx context.Context, hash string) (io.ReadCloser, error)
	// Close releases the store (not the state it keeps).
	Close() error
}

// droppedEntry is the entry that ends a log at MaxLogEntries.
func droppedEntry() e2bapi.BuildLogEntry {
	return e2bapi.BuildLogEntry{Timestamp: time.Now().UTC(), Level: e2bapi.LogLevelWarn,
		Message: "the build log holds at most " + strconv.Itoa(MaxLogEntries) + " entries; later ones are dropped"}
}

// appendCapped appends entries to a log of n entries, keeping it at most
// MaxLogEntries+1 long: what it appends.
func appendCapped(n int, entries []e2bapi.BuildLogEntry) []e2bapi.BuildLogEntry {
	switch room := MaxLogEntries - n; {
	case room >= len(entries):
		return entries
	case room >= 0:
		return append(entries[:room:room], droppedEntry())
	}
	return nil
}

package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// The process journal: a background process's record goes to an append-only
// file in its sandbox's log directory (LOGS/ID/procs.jsonl, one JSON
// procRecord a line) rather than into a rewrite of the sandbox record. A
// record rewrite is a new file and a rename in the one directory every
// sandbox's record lives in, so every process start on the node took that
// directory's lock and made and freed an inode (on an ext4 without a journal
// each freed inode lengthens every later inode allocation's search for a
// while); an append is neither. The record's next save takes the journal's
// processes in (the sandbox's rec.Procs holds them already) and empties the
// journal; re-adoption reads both (mergeProcJournal).

const procJournalName = "procs.jsonl"

func (m *Manager) procJournalPath(id string) string {
	return filepath.Join(m.logDir(id), procJournalName)
}

// journalProc appends r to the process journal of sandbox id (its log
// directory exists). The caller holds the sandbox's lock.
func (m *Manager) journalProc(id string, r procRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return errdefs.Internal(err, "encode process record")
	}
	f, err := os.OpenFile(m.procJournalPath(id), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return errdefs.Internal(err, "open process journal")
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errdefs.Internal(err, "append to process journal")
	}
	return nil
}

// clearProcJournal empties sandbox id's process journal once its record holds
// everything the journal did (the record was just saved).
func (m *Manager) clearProcJournal(id string) error {
	err := os.Truncate(m.procJournalPath(id), 0)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return errdefs.Internal(err, "empty process journal")
	}
	return nil
}

// mergeProcJournal adds to r the processes its journal holds that r lacks, and
// moves r.NextProc past every journaled process. A line cut short by a crash
// is skipped. It reports whether the journal held any line.
func (m *Manager) mergeProcJournal(r *record) bool {
	b, err := os.ReadFile(m.procJournalPath(r.ID))
	if err != nil || len(b) == 0 {
		return false
	}
	have := make(map[string]bool, len(r.Procs))
	for _, p := range r.Procs {
		have[p.ID] = true
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, len(b)+1)
	for sc.Scan() {
		var p procRecord
		if json.Unmarshal(sc.Bytes(), &p) != nil || p.ID == "" {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(p.ID, "p")); err == nil && n > r.NextProc {
			r.NextProc = n
		}
		if !have[p.ID] {
			have[p.ID] = true
			r.Procs = append(r.Procs, p)
		}
	}
	return true
}

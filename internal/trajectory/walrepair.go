package trajectory

import (
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/wal"
)

// A power loss can leave a WAL file torn: a disk writes dirty pages back in
// any order, so a later block may be on disk while an earlier one, not yet
// fsynced, is lost. Pebble's WAL records carry the offset their writer
// believed synced, and lazyWALFS tells the writer its syncs succeeded while it
// skips them (the started marks are written, not fsynced); a record after the
// hole then claims the hole was synced, and Pebble refuses to open the log as
// corrupt ("pebble/record: invalid chunk").
//
// What the hole and everything after it hold was never fsynced by the store,
// so no answer rests on it: a durable write returns only after syncDurable has
// fsynced every WAL file, oldest first, past its record, and a fsynced byte
// survives. So the first record of a WAL file that cannot be read starts after
// every byte an answer rests on (a record that straddles the last fsynced byte
// was not answered either). cutTornWAL cuts each WAL file with such a record
// there, and Open is tried again. A started mark lost with a tail is a step
// whose sandbox the power loss ended too (doc.go).

// walCut is one WAL file cutTornWAL cut.
type walCut struct {
	File    string // the WAL file
	At      int64  // the offset it was cut at
	Dropped int64  // bytes dropped
}

// cutTornWAL cuts every WAL file in dir at its first record it cannot read
// (see above) and returns what it cut (nothing when every file reads whole).
func cutTornWAL(fs vfs.FS, dir string) ([]walCut, error) {
	logs, err := wal.Scan(wal.Dir{FS: fs, Dirname: dir})
	if err != nil {
		return nil, err
	}
	var cuts []walCut
	for _, ll := range logs {
		off, torn, err := firstBadRecord(ll)
		if err != nil {
			return cuts, err
		}
		if !torn {
			continue
		}
		c := walCut{File: off.PhysicalFile, At: off.Physical}
		if c.Dropped, err = truncateFile(fs, dir, off.PhysicalFile, off.Physical); err != nil {
			return cuts, err
		}
		cuts = append(cuts, c)
	}
	if len(cuts) == 0 {
		return nil, nil
	}
	return cuts, syncDir(fs, dir)
}

// firstBadRecord reads a logical WAL to its end: torn reports a record it
// cannot read (a hole, a bad checksum, a cut record) and where it starts.
func firstBadRecord(ll wal.LogicalLog) (wal.Offset, bool, error) {
	r := ll.OpenForRead()
	defer r.Close()
	for {
		_, off, err := r.NextRecord()
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			return wal.Offset{}, false, nil
		case errors.Is(err, record.ErrInvalidChunk), errors.Is(err, record.ErrZeroedChunk),
			errors.Is(err, record.ErrUnexpectedEOF):
			return off, off.PhysicalFile != "", nil
		default:
			return wal.Offset{}, false, err
		}
	}
}

// truncateFile keeps the first n bytes of name (through a copy renamed over
// it: vfs has no truncate) and returns how many it dropped.
func truncateFile(fs vfs.FS, dir, name string, n int64) (int64, error) {
	f, err := fs.Open(name)
	if err != nil {
		return 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return 0, err
	}
	keep := make([]byte, min(n, st.Size()))
	_, err = f.ReadAt(keep, 0)
	f.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	tmp := fs.PathJoin(dir, "wal-cut.tmp")
	w, err := fs.Create(tmp, walCategory)
	if err != nil {
		return 0, err
	}
	_, err = w.Write(keep)
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, name)
	}
	if err != nil {
		return 0, fmt.Errorf("cut %s at %d: %w", name, n, err)
	}
	return st.Size() - int64(len(keep)), nil
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

package agent

// DefaultMaxLogBytes is the default cap of each background process log
// (stdout and stderr each). The sandbox's init copies the process's output
// into the log file itself, keeps the first MaxLogBytes, appends a
// truncation marker and drops the rest, so `yes` in the background costs the
// sandbox CPU time but the node at most this much disk.
const DefaultMaxLogBytes = 64 << 20

func (m *Manager) bgLogCap() int64 {
	if m.cfg.MaxLogBytes > 0 {
		return m.cfg.MaxLogBytes
	}
	return DefaultMaxLogBytes
}

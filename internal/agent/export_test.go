package agent

// SetIDs makes m name the sandboxes it creates with next (tests: IDs of an older
// format).
func SetIDs(m *Manager, next func() string) { m.newID = next }

// HoldSandbox takes sandbox id's lock, as a long operation (delete, pause with
// reclaim) does, until release is called.
func HoldSandbox(m *Manager, id string) (release func()) {
	sb, err := m.get(id)
	if err != nil {
		panic(err)
	}
	sb.mu.Lock()
	return sb.mu.Unlock
}

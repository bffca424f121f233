package agent

// SetIDs makes m name the sandboxes it creates with next (tests: IDs of an older
// format).
func SetIDs(m *Manager, next func() string) { m.newID = next }

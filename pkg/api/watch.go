package api

// WatchRequest creates a directory watch (session Files.CreateWatch): the
// sandbox's node keeps it, so any API server reads its events.
type WatchRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// Watch is a directory watch.
type Watch struct {
	ID        string `json:"id"`
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// What changed in a watched directory (WatchEvent.Op).
const (
	WatchCreate = "create"
	WatchWrite  = "write"
	WatchRemove = "remove"
	WatchChmod  = "chmod"
)

// WatchEvent is one change under a watched directory: Name is relative to it;
// Entry describes the file as it is now (absent for a removal).
type WatchEvent struct {
	Name  string    `json:"name"`
	Op    string    `json:"op"`
	Entry *FileInfo `json:"entry,omitempty"`
}

package api

// ForkRequest asks for Count children of a sandbox (POST /v1/sandboxes/{id}/fork).
//
// Each child starts with the parent's file system as it is at the fork: the
// parent's layers plus a read-only copy of its writable layer, shared by all
// children of this fork (one copy on the node's disk, one page cache); each
// child gets a fresh empty writable layer of its own. Processes and memory are
// not copied: a child boots its own init, like a new sandbox. The parent keeps
// running on its own writable layer (it is frozen while the copy is taken) and
// may be paused. Children run on the parent's node.
type ForkRequest struct {
	// Count is the number of children, 1 up to the node's maximum (--max-fork).
	Count int `json:"count"`
	// Overrides change what a child inherits (limits, env, labels, TTL, idle
	// timeout: non-zero fields replace the parent's; Env and Labels are merged
	// over the parent's). Backend, Image and RequestID must be empty.
	Overrides *CreateSandboxRequest `json:"overrides,omitempty"`
}

// ForkResult lists the children, in creation order.
type ForkResult struct {
	Parent   string    `json:"parent"`
	Children []Sandbox `json:"children"`
	// SnapshotBytes is the file data copied out of the parent's writable layer,
	// SnapshotMillis how long the copy took (the parent was frozen meanwhile).
	SnapshotBytes  int64   `json:"snapshot_bytes"`
	SnapshotMillis float64 `json:"snapshot_ms"`
}

// CommitRequest packs a sandbox's writable layer into a new environment
// (POST /v1/sandboxes/{id}/commit; DSec's pack_diff).
type CommitRequest struct {
	// Name is the new environment; it must not exist yet.
	Name string `json:"name"`
	// Exclude adds patterns to the default exclude list (DefaultCommitExclude):
	// "/abs/path" leaves out that path and everything under it, any other
	// pattern is matched against base names ("*.pyc", "__pycache__").
	Exclude []string `json:"exclude,omitempty"`
	// NoDefaultExclude packs everything but Exclude.
	NoDefaultExclude bool `json:"no_default_exclude,omitempty"`
}

// DefaultCommitExclude is what a commit leaves out unless told otherwise:
// scratch space, caches and build residue.
var DefaultCommitExclude = []string{
	"/tmp", "/var/tmp", "/run", "/root/.cache", "/var/cache/apt", "/var/lib/apt/lists",
	"__pycache__", "*.pyc",
}

// CommitResult is the new environment and its new layer.
type CommitResult struct {
	Image Image `json:"image"`
	// Layer is the new top layer (digest, size in the blob store).
	Layer ImageLayer `json:"layer"`
	// Exclude is the exclude list applied.
	Exclude []string `json:"exclude"`
	// Entries, Whiteouts, Opaque, Excluded, ContentBytes describe what was packed.
	Entries      int     `json:"entries"`
	Whiteouts    int     `json:"whiteouts"`
	Opaque       int     `json:"opaque"`
	Excluded     int     `json:"excluded"`
	ContentBytes int64   `json:"content_bytes"`
	Millis       float64 `json:"ms"`
}

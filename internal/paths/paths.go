// Package paths is the layout of a node's data directory, in one place: every
// package that keeps files under DATA_DIR (the agent's sandbox records and logs,
// the trajectory log, the blob store, layerd, the environment store, the token)
// asks a Paths for its location instead of joining names by hand.
//
//	DATA_DIR/
//	  token             the API bearer token
//	  sandboxes/ID.json the agent's record of each sandbox
//	  logs/ID/          background process output
//	  containers/       container driver state
//	  fncall/           FnCall engine state
//	  trajectories/     the trajectory log (pebble; trajectories.db: bbolt)
//	  blobs/            the local blob store (dir:DATA_DIR/blobs)
//	  layers/           layerd: chunk cache, mounts, socket
//	  envstore/envs/    environment manifests (`dsec image compose`)
//	  envstore/layers/  the layer index (`dsec image build --name`)
//	  images/           directory images (the default images dir)
package paths

import "path/filepath"

// DefaultRoot is the data directory of `dsec server` unless told otherwise.
const DefaultRoot = "/var/lib/dsec"

// Paths is the layout under one data directory.
type Paths struct{ Root string }

// New returns the layout under root ("" = DefaultRoot).
func New(root string) Paths {
	if root == "" {
		root = DefaultRoot
	}
	return Paths{Root: root}
}

func (p Paths) join(elem ...string) string {
	return filepath.Join(append([]string{p.Root}, elem...)...)
}

// Token is the file holding the API bearer token.
func (p Paths) Token() string { return p.join("token") }

// Sandboxes holds the agent's sandbox records (ID.json).
func (p Paths) Sandboxes() string { return p.join("sandboxes") }

// Logs holds the background process logs of sandbox id.
func (p Paths) Logs(id string) string { return p.join("logs", id) }

// Containers is the container driver's state directory.
func (p Paths) Containers() string { return p.join("containers") }

// FnCall is the FnCall engine's state directory.
func (p Paths) FnCall() string { return p.join("fncall") }

// Trajectories is the pebble trajectory log; TrajectoriesBolt the bbolt one.
func (p Paths) Trajectories() string     { return p.join("trajectories") }
func (p Paths) TrajectoriesBolt() string { return p.join("trajectories.db") }

// Blobs is the node's local blob store directory.
func (p Paths) Blobs() string { return p.join("blobs") }

// BlobSpec is the effective blob store spec: spec, or the local blob directory
// (dir:DATA_DIR/blobs, where `dsec image build` puts layers by default).
func (p Paths) BlobSpec(spec string) string {
	if spec == "" {
		return "dir:" + p.Blobs()
	}
	return spec
}

// Forks holds the read-only copies of parents' writable layers that fork
// children stack on (one directory per fork, removed with its last child).
func (p Paths) Forks() string { return p.join("forks") }

// Commits is the scratch space of commits (a writable layer's copy being packed).
func (p Paths) Commits() string { return p.join("commits") }

// Layers is layerd's root (chunk cache, mounts, its socket).
func (p Paths) Layers() string { return p.join("layers") }

// Pulls holds the records of images pulled by registry reference
// (internal/image/pull).
func (p Paths) Pulls() string { return p.join("pulls") }

// Creating holds the records of creates that answered before their image
// was on the node (internal/agent, state pulling).
func (p Paths) Creating() string { return p.join("creating") }

// BuildCache holds the Dockerfile build cache's last-use marks.
func (p Paths) BuildCache() string { return p.join("buildcache") }

// EnvStore holds environment manifests (envs/) and the layer index (layers/).
func (p Paths) EnvStore() string { return p.join("envstore") }

// Images is the directory image store under this data dir (the default images
// dir when Root is DefaultRoot).
func (p Paths) Images() string { return p.join("images") }

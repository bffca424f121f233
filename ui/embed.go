// Package webui holds the dashboard's built front end (ui/dist, made from ui/src
// by `make ui`: vite + TypeScript), embedded so that a machine without Node serves
// it. internal/frontend/dashboard serves these files; this package only carries them.
package webui

import (
	"embed"
	"io/fs"
)

//go:embed dist
var dist embed.FS

// Dist returns the built assets, index.html at the root.
func Dist() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // "dist" is embedded above: cannot happen
	}
	return sub
}

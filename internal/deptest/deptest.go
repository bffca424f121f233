// Package deptest checks dsec's dependency direction, in the style of Tailscale's
// tstest/deptest: front ends → session service → node agent (or router) → drivers.
// A package below must never import one above it, directly or through another
// package. The rules live in this package's test; Imports and Path are the
// machinery, built on `go list -deps -json`.
package deptest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
)

// Package is one package as `go list -deps -json` describes it.
type Package struct {
	ImportPath string
	Imports    []string
	Standard   bool
}

// Graph maps an import path to its direct imports, for every package in the
// transitive closure of the listed patterns.
type Graph map[string][]string

// Load runs `go list -deps -json patterns...` in dir and returns the import graph
// of the packages and everything they import (test files excluded).
func Load(dir string, patterns ...string) (Graph, error) {
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json"}, patterns...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, stderr.Bytes())
	}
	g := Graph{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p Package
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decoding go list output: %w", err)
		}
		if !p.Standard {
			g[p.ImportPath] = p.Imports
		}
	}
	return g, nil
}

// Path returns the shortest import chain from pkg to a package bad reports true
// for ([pkg, ..., bad]), or nil when pkg reaches none.
func (g Graph) Path(pkg string, bad func(string) bool) []string {
	prev := map[string]string{pkg: ""}
	queue := []string{pkg}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur != pkg && bad(cur) {
			var chain []string
			for p := cur; p != ""; p = prev[p] {
				chain = append([]string{p}, chain...)
			}
			return chain
		}
		for _, imp := range g[cur] {
			if _, seen := prev[imp]; !seen {
				prev[imp] = cur
				queue = append(queue, imp)
			}
		}
	}
	return nil
}

// Under returns a predicate matching path and every package below it.
func Under(paths ...string) func(string) bool {
	return func(p string) bool {
		for _, q := range paths {
			if p == q || strings.HasPrefix(p, q+"/") {
				return true
			}
		}
		return false
	}
}

// ClientViolations returns where root's import graph enters packages bad
// reports true for: for each forbidden package imported by an allowed one
// reachable from root, the shortest chain from root to it ([root, ..., bad]),
// sorted by the forbidden package. What a forbidden package imports in turn
// is not reported; nil when root reaches none.
func ClientViolations(g Graph, root string, bad func(string) bool) [][]string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	var entries []string
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, imp := range g[cur] {
			if _, seen := prev[imp]; seen {
				continue
			}
			prev[imp] = cur
			if bad(imp) {
				entries = append(entries, imp)
			} else {
				queue = append(queue, imp)
			}
		}
	}
	slices.Sort(entries)
	var out [][]string
	for _, e := range entries {
		var chain []string
		for p := e; p != ""; p = prev[p] {
			chain = append([]string{p}, chain...)
		}
		out = append(out, chain)
	}
	return out
}

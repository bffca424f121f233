package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/paths"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Images lists the node's images and environments with their accounting.
func (m *Manager) Images(ctx context.Context) ([]api.Image, error) {
	usage := m.layerUsage(ctx)
	out := []api.Image{}
	for _, n := range m.cfg.Images.List() {
		img, err := m.cfg.Images.Resolve(n)
		if err != nil {
			continue // listed but unreadable: GET /v1/images/{name} says why
		}
		out = append(out, img.View(usage, img.Name == m.cfg.Images.Default))
	}
	if m.cfg.Images.Refs != nil {
		pulled, err := m.cfg.Images.Refs.PulledRefs()
		if err != nil {
			return nil, err
		}
		for _, img := range pulled {
			out = append(out, img.View(usage, false))
		}
	}
	return out, nil
}

// Image describes one image or environment ("" = the default image).
// A registry reference is resolved and pulled (`dsec image pull`).
func (m *Manager) Image(ctx context.Context, name string) (api.Image, error) {
	img, err := m.cfg.Images.ResolveContext(ctx, name)
	if err != nil {
		return api.Image{}, err
	}
	var usage map[string]image.LayerUsage
	if img.Layered() {
		usage = m.layerUsage(ctx)
	}
	return img.View(usage, img.Name == m.cfg.Images.Default), nil
}

func (m *Manager) layerUsage(ctx context.Context) map[string]image.LayerUsage {
	acct, ok := m.cfg.Images.Layers.(image.LayerAccounting)
	if !ok {
		return nil
	}
	u, err := acct.LayerUsage(ctx)
	if err != nil {
		m.log.Warn("layer accounting", "err", err)
	}
	return u
}

// ImagePulls implements session.Images: the node's pulls in flight (ref
// set: only ref's), each naming this node.
func (m *Manager) ImagePulls(ctx context.Context, ref string) ([]api.PullProgress, error) {
	out, err := m.cfg.Images.Pulls(ref)
	for i := range out {
		out[i].Node = m.cfg.Node
	}
	return out, err
}

// ImageInUse reports whether a sandbox of m runs on image name (an
// environment store asks it before removing name).
func (m *Manager) ImageInUse(name string) bool {
	m.WaitTeardowns()
	m.mu.RLock()
	sbs := make([]*sandbox, 0, len(m.sandboxes))
	for _, sb := range m.sandboxes {
		sbs = append(sbs, sb)
	}
	m.mu.RUnlock()
	for _, sb := range sbs {
		sb.mu.Lock()
		used := sb.rec.Image == name
		sb.mu.Unlock()
		if used {
			return true
		}
	}
	return false
}

// ImagesInUse returns the image names used by the sandboxes recorded under
// dataDir (for `dsec image rm`, which runs beside a live or stopped agent).
func ImagesInUse(dataDir string) (map[string]int, error) {
	dir := paths.New(dataDir).Sandboxes()
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return map[string]int{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // deleted meanwhile
		}
		var r struct {
			Image string `json:"image"`
		}
		if json.Unmarshal(b, &r) == nil && r.Image != "" {
			out[r.Image]++
		}
	}
	return out, nil
}

// ImageDigestsInUse returns, for each registry image digest the node's
// sandboxes (running or paused) use, their IDs: the image cache never
// removes those images.
func (m *Manager) ImageDigestsInUse() map[string][]string {
	m.WaitTeardowns()
	m.mu.RLock()
	sbs := make([]*sandbox, 0, len(m.sandboxes))
	for _, sb := range m.sandboxes {
		sbs = append(sbs, sb)
	}
	m.mu.RUnlock()
	out := map[string][]string{}
	for _, sb := range sbs {
		sb.mu.Lock()
		dg, id, gone := sb.rec.ImageDigest, sb.rec.ID, sb.deleted
		sb.mu.Unlock()
		if dg != "" && !gone {
			out[dg] = append(out[dg], id)
		}
	}
	return out
}

// LayerDigestsInUse returns the digests of the layers the sandboxes of m
// run on (the build cache keeps them).
func (m *Manager) LayerDigestsInUse() map[string]bool {
	m.WaitTeardowns()
	out := map[string]bool{}
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, sb := range m.sandboxes {
		for _, l := range sb.rec.Spec.Layers { // changed only under m.mu
			if l.Digest != "" {
				out[l.Digest] = true
			}
		}
	}
	return out
}

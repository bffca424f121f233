package e2b

// Template tags (the SDK's Template.build(t, "name:tag"), assignTags, getTags,
// removeTags). A template's environment is named by its alias and is its
// "default" tag: the latest build, as a create of the alias alone starts.
// Every other tag T is an environment of its own, named alias..T (tagEnv),
// built FROM the environment it tags with label tplLabelTag, so it has the
// tagged build's layers and config (no layer is copied) and a create of
// "alias:T" starts it (resolveTemplate). Aliases cannot contain "..", so
// these names never clash with a template's own.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

const (
	tplLabelTag = "dev.dsec.e2b.tag" // the tag an environment alias..T serves
	defaultTag  = "default"
	tagSep      = ".."
)

// templateTag is a tag name.
var templateTag = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,61}$`)

// tagEnv is the environment serving tag of template alias.
func tagEnv(alias, tag string) string {
	if tag == defaultTag {
		return alias
	}
	return alias + tagSep + tag
}

// checkTag refuses a tag that cannot name an environment of alias.
func checkTag(alias, tag string) error {
	if !templateTag.MatchString(tag) || strings.Contains(tag, tagSep) || !image.ValidName.MatchString(tagEnv(alias, tag)) {
		return errdefs.Invalid("tag %q of template %q: lowercase letters, digits, '.', '_' and '-' (no \"..\"; at most %d with the name)", tag, alias, 62)
	}
	return nil
}

// splitTagged splits "name:tag" (tag "default" when absent).
func splitTagged(s string) (alias, tag string) {
	alias, tag, ok := strings.Cut(s, ":")
	if !ok || tag == "" {
		tag = defaultTag
	}
	return alias, tag
}

// tagRoutes are the routes of template tags (see Handler.New).
func (h *Handler) tagRoutes() []route {
	return []route{
		{"POST /templates/tags", h.assignTags},
		{"DELETE /templates/tags", h.removeTags},
		// GET /templates/{templateID}/tags; a pattern ending in "tags" would
		// overlap the alias lookup's (/templates/aliases/tags), which wins.
		{"GET /templates/{templateID}/{sub}", h.templateTags},
	}
}

// tagTemplate makes tag of alias name the environment from (a template's
// environment): a build FROM it that only labels the tag.
func (h *Handler) tagTemplate(ctx context.Context, alias, tag, from string) error {
	label := tag // the default tag: the label of the build tagged is cleared
	if tag == defaultTag {
		label = ""
	}
	df := "FROM " + from + "\nLABEL " + tplLabelTag + "=" + mustQuote(label) + "\n"
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeBuildContext(pw, df, nil, nil, nil)) }()
	_, err := h.svc.BuildImage(session.WithoutStep(ctx), api.BuildImageRequest{Name: tagEnv(alias, tag)}, pr)
	_ = pr.CloseWithError(io.ErrClosedPipe)
	h.templates.forget()
	if err != nil {
		return fmt.Errorf("tag %s:%s: %w", alias, tag, err)
	}
	return nil
}

// assignTags answers POST /templates/tags {target: "name[:tag]", tags}: each
// tag now names the build target names.
func (h *Handler) assignTags(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.AssignTemplateTagsRequest
	if err := decodeBody(w, r, &req); err != nil {
		h.writeErr(w, r, err)
		return
	}
	alias, tag := splitTagged(req.Target)
	if len(req.Tags) == 0 {
		h.writeAPIError(w, r, http.StatusBadRequest, "tags: at least one tag is required")
		return
	}
	for _, t := range append([]string{tag}, req.Tags...) {
		if err := checkTag(alias, t); err != nil {
			h.writeErr(w, r, err)
			return
		}
	}
	img, err := h.taggedImage(r.Context(), alias, tag)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	if img == nil {
		h.writeAPIError(w, r, http.StatusNotFound, fmt.Sprintf("template %q not found", req.Target))
		return
	}
	for _, t := range req.Tags {
		if t == tag {
			continue
		}
		if err := h.tagTemplate(r.Context(), alias, t, img.Name); err != nil {
			h.writeErr(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, struct {
		BuildID string   `json:"buildID"`
		Tags    []string `json:"tags"`
	}{img.Config.Labels[tplLabelBuild], req.Tags})
}

// taggedImage is the environment of alias:tag when a template build (or
// assignTags) wrote it, nil when there is none.
func (h *Handler) taggedImage(ctx context.Context, alias, tag string) (*api.Image, error) {
	if !templateName.MatchString(alias) || strings.Contains(alias, tagSep) {
		return nil, nil
	}
	img, err := h.templateImage(ctx, tagEnv(alias, tag))
	if err != nil || !isTemplate(img) || img.Config.Labels[tplLabelTemplate] != alias {
		return nil, err
	}
	return img, nil
}

// removeTags answers DELETE /templates/tags {name, tags}. The default tag is
// the template itself (DELETE /templates/{name} removes it).
func (h *Handler) removeTags(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.DeleteTemplateTagsRequest
	if err := decodeBody(w, r, &req); err != nil {
		h.writeErr(w, r, err)
		return
	}
	alias, _ := splitTagged(req.Name)
	if len(req.Tags) == 0 {
		h.writeAPIError(w, r, http.StatusBadRequest, "tags: at least one tag is required")
		return
	}
	for _, t := range req.Tags {
		if t == defaultTag {
			h.writeAPIError(w, r, http.StatusBadRequest, fmt.Sprintf("tag %q is template %q itself: delete the template with DELETE /templates/%s", t, alias, alias))
			return
		}
		if err := checkTag(alias, t); err != nil {
			h.writeErr(w, r, err)
			return
		}
	}
	for _, t := range req.Tags {
		img, err := h.taggedImage(r.Context(), alias, t)
		if err != nil {
			h.writeErr(w, r, err)
			return
		}
		if img == nil {
			h.writeAPIError(w, r, http.StatusNotFound, fmt.Sprintf("tag %q of template %q not found", t, alias))
			return
		}
		if err := h.svc.RemoveImage(r.Context(), img.Name); err != nil {
			h.writeRemoveErr(w, r, "template", alias+":"+t, err)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// templateTags answers GET /templates/{templateID}/tags: default (the
// template's own environment) and every tag environment, by name.
func (h *Handler) templateTags(w http.ResponseWriter, r *http.Request) {
	alias := r.PathValue("templateID")
	if r.PathValue("sub") != "tags" {
		h.writeAPIError(w, r, http.StatusNotFound, fmt.Sprintf("no route GET %s", r.URL.Path))
		return
	}
	envs, err := h.tagEnvs(r.Context(), alias)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	if len(envs) == 0 {
		h.writeAPIError(w, r, http.StatusNotFound, fmt.Sprintf("template %q not found", alias))
		return
	}
	type tagInfo struct {
		Tag       string    `json:"tag"`
		BuildID   string    `json:"buildID"`
		CreatedAt time.Time `json:"createdAt"`
	}
	out := []tagInfo{}
	for _, img := range envs {
		out = append(out, tagInfo{Tag: tagOf(img), BuildID: img.Config.Labels[tplLabelBuild], CreatedAt: time.Unix(0, 0).UTC()})
	}
	writeJSON(w, http.StatusOK, out)
}

// tagOf is the tag an environment of a template serves.
func tagOf(img api.Image) string {
	if t := img.Config.Labels[tplLabelTag]; t != "" {
		return t
	}
	return defaultTag
}

// tagEnvs lists template alias's environments, its own first then its tags'
// by name (none: alias is no template built through E2B's API).
func (h *Handler) tagEnvs(ctx context.Context, alias string) ([]api.Image, error) {
	if !templateName.MatchString(alias) || strings.Contains(alias, tagSep) {
		return nil, nil
	}
	imgs, err := h.svc.Images(session.WithoutStep(ctx))
	if err != nil {
		return nil, err
	}
	var out []api.Image
	for _, img := range imgs {
		if !isTemplate(&img) || img.Config.Labels[tplLabelTemplate] != alias {
			continue
		}
		if img.Name == alias || strings.HasPrefix(img.Name, alias+tagSep) && img.Config.Labels[tplLabelTag] != "" {
			out = append(out, img)
		}
	}
	slices.SortFunc(out, func(a, b api.Image) int {
		switch {
		case a.Name == alias:
			return -1
		case b.Name == alias:
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

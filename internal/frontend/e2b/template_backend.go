package e2b

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// E2B templates are dsec images. An image records, in the labels of its
// config (image.json "config": {"labels": {...}}), what it is as a template:
//
//   - LabelBackend: the backend its sandboxes run on (container, microvm or
//     fullvm; unset: container), so an E2B client, which cannot name a
//     backend, reaches every backend;
//   - LabelTemplate: the template ID it serves when that is not its name
//     (image "e2b-desktop" is E2B's template "desktop", while the image named
//     "desktop" is the FullVM desktop, template "desktop-fullvm").
//
// Template ID T is the image labelled T (several: the one named "e2b-"+T,
// then the one named T, then the first by name: a snapshot inherits its
// image's labels), else the image named T; "base" is the node's default
// image. An ID no image answers to is passed on as an image name (a
// registry reference, a snapshot made this instant) on the container
// backend; the node answers not_found for an unknown one.
const (
	LabelTemplate = "dsec.e2b.template"
	LabelBackend  = "dsec.backend"
)

// templateListTTL is how long create reuses the node's image list (a
// template not in it is looked for in a new one).
const templateListTTL = 2 * time.Second

// template is what create makes for a template ID.
type template struct {
	image   string // "" : the node's default image
	backend string // "" : container
	// start and ready are the commands a template build recorded on the
	// image (templates.go), run at each create.
	start, ready string
	// cpu and memoryBytes are the template's resources (0: the defaults).
	cpu         float64
	memoryBytes int64
}

// imageList caches the service's image list for template lookups: a create
// of a template other than base would otherwise list every node's images.
type imageList struct {
	mu     sync.Mutex
	images []api.Image
	at     time.Time
}

// get returns the image list, at most templateListTTL old (fresh: listed
// now), and whether it was listed for this call.
func (l *imageList) get(ctx context.Context, list func(context.Context) ([]api.Image, error), fresh bool) ([]api.Image, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !fresh && l.images != nil && time.Since(l.at) < templateListTTL {
		return l.images, false, nil
	}
	imgs, err := list(ctx)
	if err != nil {
		return nil, false, err
	}
	l.images, l.at = imgs, time.Now()
	return imgs, true, nil
}

// forget drops the cached list: an image was built or removed here.
func (l *imageList) forget() {
	l.mu.Lock()
	l.images = nil
	l.mu.Unlock()
}

// resolveTemplate says which image and backend template id creates.
func (h *Handler) resolveTemplate(ctx context.Context, id string) (template, error) {
	if id == baseTemplate {
		return template{}, nil
	}
	// "name:tag" is the environment of a template's tag (templates_tags.go)
	// when there is one, else the reference it spells.
	want := id
	if alias, tag, ok := strings.Cut(id, ":"); ok && templateName.MatchString(alias) && checkTag(alias, tag) == nil {
		want = tagEnv(alias, tag)
	}
	var img api.Image
	for _, fresh := range []bool{false, true} {
		imgs, listed, err := h.templates.get(ctx, h.svc.Images, fresh)
		if err != nil {
			if errdefs.Is(err, api.CodeNotImplemented) {
				return template{image: id}, nil
			}
			return template{}, fmt.Errorf("template %s: list images: %w", id, err)
		}
		var ok bool
		if img, ok = pickTemplate(imgs, want); ok {
			break
		}
		if listed || fresh {
			// Not in a list taken now (an image made since the cached
			// list is looked for once more).
			return template{image: id}, nil
		}
	}
	backend := imageLabel(img, LabelBackend)
	switch backend {
	case "", api.BackendContainer, api.BackendMicroVM, api.BackendFullVM:
	default:
		return template{}, errdefs.Invalid("template %s: image %q records backend %q; E2B templates run on %s, %s or %s",
			id, img.Name, backend, api.BackendContainer, api.BackendMicroVM, api.BackendFullVM)
	}
	t := template{image: img.Name, backend: backend}
	if isTemplate(&img) {
		if t.start = img.Config.Labels[tplLabelStart]; t.start != "" {
			t.ready = img.Config.Labels[tplLabelReady]
		}
		if n, err := strconv.Atoi(img.Config.Labels[tplLabelCPU]); err == nil && n > 0 {
			t.cpu = float64(n)
		}
		if n, err := strconv.ParseInt(img.Config.Labels[tplLabelMemory], 10, 64); err == nil && n > 0 {
			t.memoryBytes = n << 20
		}
	}
	return t, nil
}

// pickTemplate is the image serving template id among imgs.
func pickTemplate(imgs []api.Image, id string) (api.Image, bool) {
	var claimed []api.Image
	var named *api.Image
	for i, img := range imgs {
		if imageLabel(img, LabelTemplate) == id {
			claimed = append(claimed, img)
		}
		if img.Name == id {
			named = &imgs[i]
		}
	}
	if len(claimed) == 0 {
		if named != nil {
			return *named, true
		}
		return api.Image{}, false
	}
	for _, want := range []string{"e2b-" + id, id} {
		for _, img := range claimed {
			if img.Name == want {
				return img, true
			}
		}
	}
	first := claimed[0]
	for _, img := range claimed[1:] {
		if img.Name < first.Name {
			first = img
		}
	}
	return first, true
}

// imageLabel is label key of img's config ("" when unset).
func imageLabel(img api.Image, key string) string {
	if img.Config == nil {
		return ""
	}
	return img.Config.Labels[key]
}

package e2b

// E2B template builds (SDK v2 Template.build, the e2b CLI) onto dsec's
// Dockerfile builds: the step list E2B's SDK sends is translated into a
// Dockerfile (translateTemplate), the files its COPY steps upload become the
// build context, and session.Images.BuildImage writes the environment named by
// the template's alias. Start and ready commands are recorded on the
// environment as image labels, and a create of the template starts them
// (templateStart).

import (
	"archive/tar"
	"bufio"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Image labels a template build records on its environment.
const (
	tplLabelTemplate = "dev.dsec.e2b.template" // the alias: the environment is an E2B template
	tplLabelBuild    = "dev.dsec.e2b.build"    // the build ID that wrote it
	tplLabelStart    = "dev.dsec.e2b.start-cmd"
	tplLabelReady    = "dev.dsec.e2b.ready-cmd"
)

// E2B's default base image (Template().fromBaseImage(), and a template that
// names no base): it means the node's default image, as the "base" template does.
const e2bBaseImage = "e2bdev/base"

// uploadLinkTTL is how long an upload link the build hands out stays valid.
const uploadLinkTTL = time.Hour

var (
	// templateName is a template alias dsec can store as an environment name.
	templateName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)
	// filesHash is the hash naming a COPY step's uploaded files.
	filesHash = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	// envKey is a variable name setEnvs may set.
	envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// dockerfileLine finds the line a build error names.
	dockerfileLine = regexp.MustCompile(`^Dockerfile line (\d+): `)
)

// templateBuilds holds the builds this API server runs and the files uploaded
// for them. A finished build's result is the environment itself (labels
// tplLabelTemplate and tplLabelBuild), so status polls for a ready build are
// answered by any API server; a build in progress or failed is known to the
// server that runs it.
type templateBuilds struct {
	mu     sync.Mutex
	dir    string // uploaded tars, "<hash>.tar"; created on first upload
	builds map[string]*templateBuild
	ctx    context.Context // builds run under it; close cancels it
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// templateBuild is one build's state.
type templateBuild struct {
	created    time.Time
	templateID string
	tags       []string
	started    bool
	status     e2bapi.TemplateBuildStatus
	logs       []e2bapi.BuildLogEntry
	reason     *e2bapi.BuildStatusReason
}

func newTemplateBuilds() *templateBuilds {
	ctx, cancel := context.WithCancel(context.Background())
	return &templateBuilds{builds: map[string]*templateBuild{}, ctx: ctx, cancel: cancel}
}

// close stops the running builds and removes the uploaded files.
func (t *templateBuilds) close() error {
	t.cancel()
	t.wg.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dir == "" {
		return nil
	}
	return os.RemoveAll(t.dir)
}

// uploadDir returns the directory of uploaded files, creating it.
func (t *templateBuilds) uploadDir() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dir == "" {
		d, err := os.MkdirTemp("", "dsec-e2b-uploads-")
		if err != nil {
			return "", errdefs.Internal(err, "template uploads directory")
		}
		t.dir = d
	}
	return t.dir, nil
}

// uploaded returns the path of the files uploaded under hash, and whether they are.
func (t *templateBuilds) uploaded(hash string) (string, bool) {
	t.mu.Lock()
	dir := t.dir
	t.mu.Unlock()
	if dir == "" {
		return "", false
	}
	p := filepath.Join(dir, hash+".tar")
	_, err := os.Stat(p)
	return p, err == nil
}

// buildRetention is how long a build's state is kept (a build still running
// is kept until it ends).
const buildRetention = 24 * time.Hour

// add records a new build and forgets those past buildRetention.
func (t *templateBuilds) add(buildID string, b *templateBuild) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, old := range t.builds {
		if time.Since(old.created) > buildRetention && old.status != e2bapi.TemplateBuildStatusBuilding {
			delete(t.builds, id)
		}
	}
	t.builds[buildID] = b
}

func (t *templateBuilds) get(buildID string) (templateBuild, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.builds[buildID]
	if !ok {
		return templateBuild{}, false
	}
	c := *b
	c.logs = append([]e2bapi.BuildLogEntry(nil), b.logs...)
	return c, true
}

func (t *templateBuilds) update(buildID string, f func(b *templateBuild)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b, ok := t.builds[buildID]; ok {
		f(b)
	}
}

func (h *Handler) templateRoutes() []route {
	return []route{
		{"POST /v3/templates", h.requestTemplateBuild},
		{"GET /templates/aliases/{alias}", h.templateAlias},
		{"GET /templates/{templateID}/files/{hash}", h.templateUploadLink},
		{"PUT /templates/{templateID}/files/{hash}", h.templateUpload},
		{"POST /v2/templates/{templateID}/builds/{buildID}", h.startTemplateBuild},
		{"GET /templates/{templateID}/builds/{buildID}/status", h.templateBuildStatus},
	}
}

// templateImage returns the environment of template id when it is one a
// template build wrote (nil, nil when there is none).
func (h *Handler) templateImage(ctx context.Context, id string) (*api.Image, error) {
	img, err := h.svc.Image(session.WithoutStep(ctx), id)
	switch {
	case errdefs.Is(err, api.CodeNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &img, nil
}

// isTemplate says whether img was written by a template build.
func isTemplate(img *api.Image) bool {
	return img != nil && img.Config != nil && img.Config.Labels[tplLabelTemplate] != ""
}

// requestTemplateBuild answers POST /v3/templates: a template ID (the alias)
// and a build ID for the steps the SDK sends next.
func (h *Handler) requestTemplateBuild(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.TemplateBuildRequestV3
	if err := decodeBody(w, r, &req); err != nil {
		h.writeErr(w, r, err)
		return
	}
	name := ""
	switch {
	case req.Name != nil:
		name = *req.Name
	case req.Alias != nil:
		name = *req.Alias
	}
	var tags []string
	if req.Tags != nil {
		tags = append(tags, *req.Tags...)
	}
	alias, tag, hasTag := strings.Cut(name, ":")
	if hasTag {
		tags = append(tags, tag)
	}
	if !templateName.MatchString(alias) {
		h.writeAPIError(w, r, http.StatusBadRequest, fmt.Sprintf("template name %q: lowercase letters, digits, '.', '_' and '-' (at most 128), optionally ':TAG'", name))
		return
	}
	if alias == baseTemplate {
		h.writeAPIError(w, r, http.StatusConflict, fmt.Sprintf("template name %q is the node's default template", alias))
		return
	}
	img, err := h.templateImage(r.Context(), alias)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	if img != nil && !isTemplate(img) {
		h.writeAPIError(w, r, http.StatusConflict, fmt.Sprintf("%q is a dsec environment not built as an E2B template; choose another name", alias))
		return
	}
	if len(tags) == 0 {
		tags = []string{"default"}
	}
	buildID := newUUID()
	h.tpl.add(buildID, &templateBuild{created: time.Now(), templateID: alias, tags: tags, status: e2bapi.TemplateBuildStatusWaiting})
	writeJSON(w, http.StatusAccepted, e2bapi.TemplateRequestResponseV3{TemplateID: alias, BuildID: buildID,
		Aliases: []string{alias}, Names: []string{alias}, Tags: tags})
}

// templateAlias answers GET /templates/aliases/{alias}: "base" and every
// environment a create can start from (built as a template or not).
func (h *Handler) templateAlias(w http.ResponseWriter, r *http.Request) {
	alias := r.PathValue("alias")
	if !templateName.MatchString(alias) {
		h.writeAPIError(w, r, http.StatusBadRequest, fmt.Sprintf("invalid template alias %q", alias))
		return
	}
	if alias != baseTemplate {
		img, err := h.templateImage(r.Context(), alias)
		if err != nil {
			h.writeErr(w, r, err)
			return
		}
		if img == nil {
			h.writeAPIError(w, r, http.StatusNotFound, fmt.Sprintf("template %q not found", alias))
			return
		}
	}
	writeJSON(w, http.StatusOK, e2bapi.TemplateAliasResponse{TemplateID: alias, Public: false})
}

// uploadToken signs an upload link for the files of hash until exp.
func (h *Handler) uploadToken(templateID, hash string, exp int64) string {
	return h.token("dsec-e2b-upload", templateID+"\x00"+hash+"\x00"+strconv.FormatInt(exp, 10))
}

// signedUpload says whether r is a PUT of template files with a valid,
// unexpired upload token (the link templateUploadLink handed out): it needs
// no API key, as E2B's storage links need none.
func (h *Handler) signedUpload(r *http.Request) bool {
	if r.Method != http.MethodPut {
		return false
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) != 4 || parts[0] != "templates" || parts[2] != "files" {
		return false
	}
	q := r.URL.Query()
	exp, err := strconv.ParseInt(q.Get("expires"), 10, 64)
	if err != nil || time.Now().Unix() > exp {
		return false
	}
	want := h.uploadToken(parts[1], parts[3], exp)
	return subtle.ConstantTimeCompare([]byte(q.Get("token")), []byte(want)) == 1
}

// templateUploadLink answers GET /templates/{templateID}/files/{hash}: whether
// the files are here already and, if not, a signed link to PUT their tar to.
func (h *Handler) templateUploadLink(w http.ResponseWriter, r *http.Request) {
	id, hash := r.PathValue("templateID"), r.PathValue("hash")
	if !filesHash.MatchString(hash) {
		h.writeAPIError(w, r, http.StatusBadRequest, fmt.Sprintf("invalid files hash %q", hash))
		return
	}
	if _, ok := h.tpl.uploaded(hash); ok {
		writeJSON(w, http.StatusCreated, e2bapi.TemplateBuildFileUpload{Present: true})
		return
	}
	exp := time.Now().Add(uploadLinkTTL).Unix()
	scheme := "http"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	u := url.URL{Scheme: scheme, Host: r.Host, Path: "/templates/" + url.PathEscape(id) + "/files/" + hash,
		RawQuery: url.Values{"expires": {strconv.FormatInt(exp, 10)}, "token": {h.uploadToken(id, hash, exp)}}.Encode()}
	link := u.String()
	writeJSON(w, http.StatusCreated, e2bapi.TemplateBuildFileUpload{Present: false, Url: &link})
}

// templateUpload stores the tar (plain or gzip) PUT to an upload link.
func (h *Handler) templateUpload(w http.ResponseWriter, r *http.Request) {
	hash := r.PathValue("hash")
	if !filesHash.MatchString(hash) {
		h.writeAPIError(w, r, http.StatusBadRequest, fmt.Sprintf("invalid files hash %q", hash))
		return
	}
	dir, err := h.tpl.uploadDir()
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	f, err := os.CreateTemp(dir, "upload-*")
	if err != nil {
		h.writeErr(w, r, errdefs.Internal(err, "template upload"))
		return
	}
	defer func() { _ = os.Remove(f.Name()) }()
	_, err = copyTar(f, http.MaxBytesReader(w, r.Body, h.opts.MaxUploadBytes))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, hash+".tar"))
	}
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// copyTar copies the tar in r (gzip-compressed or not) to w uncompressed,
// checking that it is a tar.
func copyTar(w io.Writer, r io.Reader) (int64, error) {
	br := bufio.NewReader(r)
	var src io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return 0, errdefs.Invalid("template files: %v", err)
		}
		defer zr.Close()
		src = zr
	}
	tr := tar.NewReader(src)
	tw := tar.NewWriter(w)
	var n int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return n, errdefs.Invalid("template files: not a tar archive: %v", err)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return n, errdefs.Internal(err, "template upload")
		}
		c, err := io.Copy(tw, tr)
		n += c
		if err != nil {
			return n, errdefs.Invalid("template files: %v", err)
		}
	}
	if err := tw.Close(); err != nil {
		return n, errdefs.Internal(err, "template upload")
	}
	return n, nil
}

// startTemplateBuild answers POST /v2/templates/{templateID}/builds/{buildID}:
// the steps are translated now (a bad step is 400) and built in the background.
func (h *Handler) startTemplateBuild(w http.ResponseWriter, r *http.Request) {
	id, buildID := r.PathValue("templateID"), r.PathValue("buildID")
	var spec e2bapi.TemplateBuildStartV2
	if err := decodeBody(w, r, &spec); err != nil {
		h.writeErr(w, r, err)
		return
	}
	b, ok := h.tpl.get(buildID)
	switch {
	case !ok || b.templateID != id:
		h.writeAPIError(w, r, http.StatusNotFound, fmt.Sprintf("build %q of template %q not found (request it with POST /v3/templates)", buildID, id))
		return
	case b.started:
		h.writeAPIError(w, r, http.StatusConflict, fmt.Sprintf("build %q already started", buildID))
		return
	}
	base, err := h.resolveBase(r.Context(), spec)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	tr, err := translateTemplate(spec, base, id, buildID)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	files := map[string]string{}
	for _, hash := range tr.files {
		p, ok := h.tpl.uploaded(hash)
		if !ok {
			h.writeAPIError(w, r, http.StatusBadRequest, fmt.Sprintf("the files of hash %s were not uploaded (GET /templates/%s/files/%s gives the link)", hash, id, hash))
			return
		}
		files[hash] = p
	}
	h.tpl.update(buildID, func(b *templateBuild) {
		b.started = true
		b.status = e2bapi.TemplateBuildStatusBuilding
	})
	h.tpl.wg.Add(1)
	go func() {
		defer h.tpl.wg.Done()
		h.runTemplateBuild(h.tpl.ctx, id, buildID, tr, files)
	}()
	w.WriteHeader(http.StatusAccepted)
}

// runTemplateBuild runs a translated build and records its outcome.
func (h *Handler) runTemplateBuild(ctx context.Context, id, buildID string, tr translatedTemplate, files map[string]string) {
	logf := func(level e2bapi.LogLevel, step, msg string) {
		e := e2bapi.BuildLogEntry{Timestamp: time.Now().UTC(), Level: level, Message: msg}
		if step != "" {
			e.Step = &step
		}
		h.tpl.update(buildID, func(b *templateBuild) { b.logs = append(b.logs, e) })
	}
	fail := func(step, msg string) {
		logf(e2bapi.LogLevelError, step, msg)
		h.tpl.update(buildID, func(b *templateBuild) {
			b.status = e2bapi.TemplateBuildStatusError
			entries := append([]e2bapi.BuildLogEntry(nil), b.logs[len(b.logs)-1])
			b.reason = &e2bapi.BuildStatusReason{Message: msg, LogEntries: &entries}
			if step != "" {
				b.reason.Step = &step
			}
		})
	}
	dockerfile := tr.dockerfile
	logf(e2bapi.LogLevelInfo, "base", "Building template "+id+" (build "+buildID+")")
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeBuildContext(pw, dockerfile, files, tr.globs)) }()
	res, err := h.svc.BuildImage(session.WithoutStep(ctx), api.BuildImageRequest{Name: id}, pr)
	_ = pr.CloseWithError(io.ErrClosedPipe)
	if err != nil {
		step, msg := tr.explain(err)
		h.log.InfoContext(ctx, "e2b template build failed", "template", id, "build", buildID, "err", err)
		fail(step, msg)
		return
	}
	for _, s := range res.Steps {
		step := tr.steps[s.Line]
		msg := fmt.Sprintf("[%s] %s (%.0f ms)", cmp.Or(step, "finalize"), tr.describe(s.Line, s.Instruction), s.Millis)
		if s.Cached {
			msg = fmt.Sprintf("[%s] %s (cached)", cmp.Or(step, "finalize"), tr.describe(s.Line, s.Instruction))
		}
		logf(e2bapi.LogLevelInfo, step, msg)
	}
	logf(e2bapi.LogLevelInfo, "finalize", fmt.Sprintf("Template %s built: %d layer steps, %d from the cache, %.1f s", id, res.LayerSteps, res.CacheHits, res.Millis/1000))
	h.tpl.update(buildID, func(b *templateBuild) { b.status = e2bapi.TemplateBuildStatusReady })
}

// defaultImage is the node's default image (E2B's base image and template).
func (h *Handler) defaultImage(ctx context.Context) (string, error) {
	imgs, err := h.svc.Images(session.WithoutStep(ctx))
	if err != nil {
		return "", err
	}
	for _, img := range imgs {
		if img.Default {
			return img.Name, nil
		}
	}
	return "", errdefs.New(api.CodeNotFound, "this node has no default image for %s", e2bBaseImage)
}

// writeBuildContext writes the build context: the Dockerfile, and the files
// uploaded under each hash in files/HASH/.
func writeBuildContext(w io.Writer, dockerfile string, files map[string]string, globs []templateGlob) error {
	tw := tar.NewWriter(w)
	now := time.Now()
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile)), ModTime: now, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := io.WriteString(tw, dockerfile); err != nil {
		return err
	}
	for hash, p := range files {
		dir := "files/" + hash
		if err := tw.WriteHeader(&tar.Header{Name: dir + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: now}); err != nil {
			return err
		}
		if err := addUploaded(tw, dir, p, func(name string, _ byte) (string, bool) { return dir + "/" + name, true }); err != nil {
			return err
		}
	}
	for i, g := range globs {
		dir := "globs/" + strconv.Itoa(i)
		if err := tw.WriteHeader(&tar.Header{Name: dir + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: now}); err != nil {
			return err
		}
		err := addUploaded(tw, "files/"+g.hash, files[g.hash], func(name string, typ byte) (string, bool) {
			rel, ok := globMatch(g.pattern, name)
			if !ok {
				return "", false
			}
			first, rest, inDir := strings.Cut(rel, "/")
			switch {
			case inDir:
				return dir + "/" + rest, true
			case typ == tar.TypeDir:
				return "", false // a matching directory: its contents
			}
			return dir + "/" + first, true
		})
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

// addUploaded adds the entries of the uploaded tar p that name maps (by
// their path and type), and the directory dir; hard links point into dir,
// where every entry of p is.
func addUploaded(tw *tar.Writer, dir, p string, name func(string, byte) (string, bool)) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, ok := inside(hdr.Name)
		if !ok {
			return errdefs.Invalid("template files: entry %q is outside the context", hdr.Name)
		}
		if rel == "" {
			continue
		}
		to, ok := name(rel, hdr.Typeflag)
		if !ok {
			continue
		}
		hdr.Name = to
		if hdr.Typeflag == tar.TypeLink {
			target, ok := inside(hdr.Linkname)
			if !ok || target == "" {
				return errdefs.Invalid("template files: hard link %q points outside the context", hdr.Name)
			}
			hdr.Linkname = dir + "/" + target
		}
		if hdr.Typeflag == tar.TypeDir {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// inside cleans a relative tar path; false when it leaves its directory.
// The directory itself is "".
func inside(name string) (string, bool) {
	c := path.Clean(name)
	switch {
	case name == "" || path.IsAbs(name) || strings.Contains(name, "\x00") || c == ".." || strings.HasPrefix(c, "../"):
		return "", false
	case c == ".":
		return "", true
	}
	return c, true
}

// templateBuildStatus answers GET .../builds/{buildID}/status?logsOffset=N.
func (h *Handler) templateBuildStatus(w http.ResponseWriter, r *http.Request) {
	id, buildID := r.PathValue("templateID"), r.PathValue("buildID")
	offset := 0
	if s := r.URL.Query().Get("logsOffset"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			h.writeAPIError(w, r, http.StatusBadRequest, fmt.Sprintf("logsOffset %q is not a non-negative integer", s))
			return
		}
		offset = n
	}
	b, ok := h.tpl.get(buildID)
	if !ok || b.templateID != id {
		// Another API server ran it: a finished build is its environment.
		img, err := h.templateImage(r.Context(), id)
		if err != nil {
			h.writeErr(w, r, err)
			return
		}
		if !isTemplate(img) || img.Config.Labels[tplLabelBuild] != buildID {
			h.writeAPIError(w, r, http.StatusNotFound, fmt.Sprintf("build %q of template %q not found", buildID, id))
			return
		}
		b = templateBuild{templateID: id, status: e2bapi.TemplateBuildStatusReady}
	}
	entries := []e2bapi.BuildLogEntry{}
	if offset < len(b.logs) {
		entries = b.logs[offset:]
	}
	lines := make([]string, 0, len(entries))
	for _, e := range entries {
		lines = append(lines, e.Timestamp.Format(time.RFC3339)+" "+e.Message)
	}
	writeJSON(w, http.StatusOK, e2bapi.TemplateBuildInfo{BuildID: buildID, TemplateID: id, Status: b.status,
		LogEntries: entries, Logs: lines, Reason: b.reason})
}

// translatedTemplate is an E2B template as a Dockerfile.
type translatedTemplate struct {
	dockerfile string
	// base is the FROM image.
	base string
	// steps maps a Dockerfile line to E2B's step ("base", "1".., "finalize"),
	// which the SDK maps to the builder call that made it.
	steps map[int]string
	// what describes each line as the template's builder call made it.
	what map[int]string
	// files are the upload hashes the COPY steps read.
	files []string
	// globs are the COPY steps whose source is a pattern, by index.
	globs []templateGlob
}

// templateGlob is a COPY step's source pattern and the files it reads.
type templateGlob struct{ hash, pattern string }

// globMatch says where a COPY of pattern puts the uploaded entry name,
// relative to its destination, as Docker copies a wildcard's matches: a
// matching file by its base name, a matching directory's contents ("" for
// the directory itself). ok is false when the entry is not copied.
func globMatch(pattern, name string) (string, bool) {
	ps, ns := strings.Split(pattern, "/"), strings.Split(name, "/")
	if len(ns) < len(ps) {
		return "", false
	}
	if ok, err := path.Match(pattern, strings.Join(ns[:len(ps)], "/")); err != nil || !ok {
		return "", false
	}
	return strings.Join(ns[len(ps)-1:], "/"), true
}

// describe names a Dockerfile line as the template wrote it.
func (t translatedTemplate) describe(line int, instruction string) string {
	if d, ok := t.what[line]; ok {
		return d
	}
	return instruction
}

// explain turns a build error into the failed step and an E2B message
// naming the template's call rather than the Dockerfile.
func (t translatedTemplate) explain(err error) (string, string) {
	msg := err.Error()
	m := dockerfileLine.FindStringSubmatch(msg)
	if m == nil {
		return "", msg
	}
	line, _ := strconv.Atoi(m[1])
	rest := msg[len(m[0]):]
	d, ok := t.what[line]
	if !ok {
		return t.steps[line], rest
	}
	// RUN errors repeat the instruction as written; the Dockerfile form
	// means nothing to the template's author.
	if i := strings.Index(rest, "] "); strings.HasPrefix(rest, "RUN [") && i > 0 {
		rest = rest[i+2:]
	}
	return t.steps[line], fmt.Sprintf("step %s (%s): %s", t.steps[line], d, rest)
}

// templateFrom is a template's base: the image the Dockerfile starts FROM,
// as the template named it, and that image's default user.
type templateFrom struct {
	image, named, user string
}

// templateBase returns the base a template names ("" for E2B's default).
func templateBase(spec e2bapi.TemplateBuildStartV2) (string, error) {
	if spec.FromImageRegistry != nil {
		return "", errdefs.Invalid("fromImage with registry credentials: dsec takes registry credentials from the node's configuration (Docker config.json), not from a template")
	}
	base := ""
	switch {
	case spec.FromTemplate != nil && spec.FromImage != nil:
		return "", errdefs.Invalid("a template has one base: fromImage or fromTemplate")
	case spec.FromTemplate != nil:
		base = *spec.FromTemplate
	case spec.FromImage != nil:
		base = *spec.FromImage
	}
	if base == baseTemplate || base == e2bBaseImage {
		base = ""
	}
	if strings.ContainsAny(base, " \t\n\r$\"'\\") {
		return "", errdefs.Invalid("base image %q is not an image reference", base)
	}
	return base, nil
}

// resolveBase finds the image a template starts from: E2B's default base is
// the node's default image; the default user is the image's (root when the
// image is not on this node yet, e.g. a reference the build will pull).
func (h *Handler) resolveBase(ctx context.Context, spec e2bapi.TemplateBuildStartV2) (templateFrom, error) {
	named, err := templateBase(spec)
	if err != nil {
		return templateFrom{}, err
	}
	from := templateFrom{image: named, named: named}
	if named == "" {
		if from.image, err = h.defaultImage(ctx); err != nil {
			return from, err
		}
	}
	if img, err := h.svc.Image(session.WithoutStep(ctx), from.image); err == nil && img.Config != nil {
		from.user = img.Config.User
	}
	return from, nil
}

// translateTemplate turns the steps of an E2B build into a Dockerfile; bad
// steps are invalid_argument.
func translateTemplate(spec e2bapi.TemplateBuildStartV2, base templateFrom, alias, buildID string) (translatedTemplate, error) {
	t := translatedTemplate{steps: map[int]string{}, what: map[int]string{}}
	var lines []string
	add := func(step, what, line string) {
		lines = append(lines, line)
		t.steps[len(lines)] = step
		if what != "" {
			t.what[len(lines)] = what
		}
	}
	t.base = base.image
	add("base", "from "+cmp.Or(base.named, e2bBaseImage), "FROM "+base.image)

	var steps []e2bapi.TemplateStep
	if spec.Steps != nil {
		steps = *spec.Steps
	}
	user := base.user // the user of the steps so far ("": root)
	for i, s := range steps {
		n := strconv.Itoa(i + 1)
		var args []string
		if s.Args != nil {
			args = *s.Args
		}
		bad := func(format string, a ...any) error {
			return errdefs.Invalid("step %s (%s): %s", n, s.Type, fmt.Sprintf(format, a...))
		}
		switch strings.ToUpper(s.Type) {
		case "RUN":
			if len(args) < 1 || len(args) > 2 || strings.TrimSpace(args[0]) == "" {
				return t, bad("want a command and an optional user, got %d arguments", len(args))
			}
			runAs := ""
			if len(args) == 2 && args[1] != "" && args[1] != user {
				if !validUser(args[1]) {
					return t, bad("invalid user %q", args[1])
				}
				runAs = args[1]
				add(n, "", "USER "+runAs)
			}
			argv, _ := json.Marshal([]string{"/bin/sh", "-c", args[0]})
			add(n, "runCmd("+strconv.Quote(args[0])+")", "RUN "+string(argv))
			if runAs != "" {
				add(n, "", "USER "+cmp.Or(user, "root"))
			}
		case "COPY":
			if len(args) < 2 || len(args) > 4 || args[0] == "" || args[1] == "" {
				return t, bad("want a source, a destination, an optional user and mode, got %d arguments", len(args))
			}
			if s.FilesHash == nil || !filesHash.MatchString(*s.FilesHash) {
				return t, bad("no valid filesHash for the uploaded files")
			}
			src := path.Clean(args[0])
			if path.IsAbs(args[0]) || src == ".." || strings.HasPrefix(src, "../") {
				return t, bad("source %q must be a path inside the template's context", args[0])
			}
			flags := ""
			if len(args) > 2 && args[2] != "" {
				if !validUser(args[2]) {
					return t, bad("invalid user %q", args[2])
				}
				flags += " --chown=" + args[2]
			}
			if len(args) > 3 && args[3] != "" {
				if _, err := strconv.ParseUint(args[3], 8, 32); err != nil {
					return t, bad("mode %q is not octal", args[3])
				}
				flags += " --chmod=" + args[3]
			}
			from := "files/" + *s.FilesHash + "/" + src
			switch {
			case src == ".":
				from = "files/" + *s.FilesHash + "/"
			case strings.ContainsAny(src, "*?["):
				// The matches are staged in a directory of their own
				// (see globMatch), so that links among them are copied
				// as links, as E2B extracts them.
				if _, err := path.Match(src, ""); err != nil {
					return t, bad("source pattern %q: %v", args[0], err)
				}
				from = "globs/" + strconv.Itoa(len(t.globs)) + "/"
				t.globs = append(t.globs, templateGlob{hash: *s.FilesHash, pattern: src})
			}
			sd, _ := json.Marshal([]string{from, args[1]})
			add(n, "copy("+strconv.Quote(args[0])+", "+strconv.Quote(args[1])+")", "COPY"+flags+" "+string(sd))
			t.files = append(t.files, *s.FilesHash)
		case "ENV":
			if len(args) == 0 || len(args)%2 != 0 {
				return t, bad("want KEY, VALUE pairs, got %d arguments", len(args))
			}
			kvs := make([]string, 0, len(args)/2)
			for j := 0; j < len(args); j += 2 {
				if !envKey.MatchString(args[j]) {
					return t, bad("invalid variable name %q", args[j])
				}
				v, err := dfQuote(args[j+1])
				if err != nil {
					return t, bad("%s: %v", args[j], err)
				}
				kvs = append(kvs, args[j]+"="+v)
			}
			add(n, "setEnvs", "ENV "+strings.Join(kvs, " "))
		case "WORKDIR":
			if len(args) != 1 || args[0] == "" {
				return t, bad("want one directory")
			}
			d, err := dfQuote(args[0])
			if err != nil {
				return t, bad("%v", err)
			}
			add(n, "setWorkdir("+strconv.Quote(args[0])+")", "WORKDIR "+d)
		case "USER":
			if len(args) != 1 || !validUser(args[0]) {
				return t, bad("want one user name or UID[:GID]")
			}
			user = args[0]
			add(n, "setUser("+strconv.Quote(user)+")", "USER "+user)
		default:
			return t, bad("unknown step type (dsec builds RUN, COPY, ENV, WORKDIR and USER steps)")
		}
	}

	labels := []string{tplLabelTemplate + "=" + mustQuote(alias), tplLabelBuild + "=" + mustQuote(buildID)}
	for _, c := range []struct {
		label string
		v     *string
	}{{tplLabelStart, spec.StartCmd}, {tplLabelReady, spec.ReadyCmd}} {
		if c.v == nil || strings.TrimSpace(*c.v) == "" {
			continue
		}
		q, err := dfQuote(*c.v)
		if err != nil {
			return t, errdefs.Invalid("%s: %v", strings.TrimPrefix(c.label, "dev.dsec.e2b."), err)
		}
		labels = append(labels, c.label+"="+q)
	}
	if spec.ReadyCmd != nil && strings.TrimSpace(*spec.ReadyCmd) != "" && (spec.StartCmd == nil || strings.TrimSpace(*spec.StartCmd) == "") {
		return t, errdefs.Invalid("a ready command checks a start command: setStartCmd first")
	}
	add("finalize", "", "LABEL "+strings.Join(labels, " "))
	t.dockerfile = strings.Join(lines, "\n") + "\n"
	return t, nil
}

// validUser says whether u is a user name or UID[:GID] (group names too).
func validUser(u string) bool {
	return u != "" && len(u) <= 64 && !strings.ContainsAny(u, " \t\n\r\"'$\\/\x00")
}

// dfQuote quotes s as a Dockerfile word: double quotes, with \, " and $
// escaped. A line break cannot be written on a Dockerfile line.
func dfQuote(s string) (string, error) {
	if strings.ContainsAny(s, "\n\r\x00") {
		return "", errors.New("line breaks and NUL bytes are not supported in this value")
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`)
	return `"` + r.Replace(s) + `"`, nil
}

func mustQuote(s string) string {
	q, _ := dfQuote(s)
	return q
}

// templateStart sets the start and ready commands a template build recorded
// on req's image (none for other images).
func (h *Handler) templateStart(ctx context.Context, req *api.CreateSandboxRequest) {
	if req.Image == "" || !templateName.MatchString(req.Image) {
		return
	}
	img, err := h.templateImage(ctx, req.Image)
	if err != nil || !isTemplate(img) {
		return // the create reports an unknown image
	}
	req.StartCmd = img.Config.Labels[tplLabelStart]
	if req.StartCmd != "" {
		req.ReadyCmd = img.Config.Labels[tplLabelReady]
	}
}

// newUUID returns a random (version 4) UUID, the form E2B's build IDs have.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	s := hex.EncodeToString(b[:])
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}

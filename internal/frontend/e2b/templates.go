package e2b

// E2B template builds (SDK v2 Template.build, the e2b CLI) onto dsec's
// Dockerfile builds: the step list E2B's SDK sends is translated into a
// Dockerfile (translateTemplate), the files its COPY steps upload become the
// build context, and session.Images.BuildImage writes the environment named by
// the template's alias. Start and ready commands are recorded on the
// environment as image labels, and a create of the template starts them
// (resolveTemplate).

import (
	"archive/tar"
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
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
	// The template's resources (cpuCount, memoryMB of the build request):
	// the defaults of the sandboxes created from it.
	tplLabelCPU    = "dev.dsec.e2b.cpu-count"
	tplLabelMemory = "dev.dsec.e2b.memory-mb"
	// tplLabelForce records the build that rebuilt the steps from a forced
	// one on (force, skipCache): it changes the cache keys of what follows.
	tplLabelForce = "dev.dsec.e2b.force"
)

// E2B's default base image (Template().fromBaseImage(), and a template that
// names no base): it means the node's default image, as the "base" template does.
const e2bBaseImage = "e2bdev/base"

// minTemplateMemoryMB is the least memory a template may ask for.
const minTemplateMemoryMB = 64

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
	// cpu and memMB are the template's resources (0: the defaults).
	cpu, memMB int32
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
	if !templateName.MatchString(alias) || strings.Contains(alias, tagSep) {
		h.writeAPIError(w, r, http.StatusBadRequest, fmt.Sprintf("template name %q: lowercase letters, digits, '.', '_' and '-' (at most 128, no \"..\"), optionally ':TAG'", name))
		return
	}
	for _, t := range tags {
		if err := checkTag(alias, t); err != nil {
			h.writeErr(w, r, err)
			return
		}
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
	b := &templateBuild{created: time.Now(), templateID: alias, tags: tags, status: e2bapi.TemplateBuildStatusWaiting}
	if req.CpuCount != nil {
		if b.cpu = *req.CpuCount; b.cpu < 1 {
			h.writeAPIError(w, r, http.StatusBadRequest, fmt.Sprintf("cpuCount %d: at least 1", b.cpu))
			return
		}
	}
	if req.MemoryMB != nil {
		if b.memMB = *req.MemoryMB; b.memMB < minTemplateMemoryMB {
			h.writeAPIError(w, r, http.StatusBadRequest, fmt.Sprintf("memoryMB %d: at least %d", b.memMB, minTemplateMemoryMB))
			return
		}
	}
	buildID := newUUID()
	h.tpl.add(buildID, b)
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
	if b.cpu > 0 {
		tr.label(tplLabelCPU, strconv.Itoa(int(b.cpu)))
	}
	if b.memMB > 0 {
		tr.label(tplLabelMemory, strconv.Itoa(int(b.memMB)))
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
	out := &logLines{emit: func(line string) { logf(e2bapi.LogLevelInfo, "", line) }}
	b, _ := h.tpl.get(buildID)
	req := api.BuildImageRequest{Name: id, Output: out, CPU: float64(b.cpu), MemoryBytes: int64(b.memMB) << 20,
		RegistryAuth: tr.auth}
	res, err := h.svc.BuildImage(session.WithoutStep(ctx), req, pr)
	out.flush()
	_ = pr.CloseWithError(io.ErrClosedPipe)
	h.templates.forget()
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
	for _, tag := range b.tags {
		if tag == defaultTag {
			continue
		}
		if err := h.tagTemplate(ctx, id, tag, id); err != nil {
			h.log.InfoContext(ctx, "e2b template tag failed", "template", id, "build", buildID, "tag", tag, "err", err)
			fail("finalize", err.Error())
			return
		}
		logf(e2bapi.LogLevelInfo, "finalize", fmt.Sprintf("Tagged %s:%s", id, tag))
	}
	logf(e2bapi.LogLevelInfo, "finalize", fmt.Sprintf("Template %s built: %d layer steps, %d from the cache, %.1f s", id, res.LayerSteps, res.CacheHits, res.Millis/1000))
	h.tpl.update(buildID, func(b *templateBuild) { b.status = e2bapi.TemplateBuildStatusReady })
}

// maxLogLine is the longest build log entry; a longer line is split.
const maxLogLine = 16 << 10

// logLines turns the build's RUN output into log entries, one per line, as
// it is written: the SDK's status polls (logsOffset) see them while the
// build runs.
type logLines struct {
	mu   sync.Mutex
	emit func(line string)
	part []byte
}

func (l *logLines) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			l.part = append(l.part, b...)
			for len(l.part) >= maxLogLine {
				l.emit(string(l.part[:maxLogLine]))
				l.part = append(l.part[:0], l.part[maxLogLine:]...)
			}
			break
		}
		l.part = append(l.part, b[:i]...)
		l.emit(strings.TrimSuffix(string(l.part), "\r"))
		l.part, b = l.part[:0], b[i+1:]
	}
	return n, nil
}

// flush emits an unterminated last line.
func (l *logLines) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.part) > 0 {
		l.emit(string(l.part))
		l.part = nil
	}
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

// newUUID returns a random (version 4) UUID, the form E2B's build IDs have.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	s := hex.EncodeToString(b[:])
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}

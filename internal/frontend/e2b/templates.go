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
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/buildstate"
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

// templateBuilds runs the builds this front end started; their state (record,
// logs, uploaded files) is in store, where every front end of the cluster
// reads it (buildstate).
type templateBuilds struct {
	store  buildstate.Store
	ctx    context.Context // builds run under it; close cancels it
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newTemplateBuilds(store buildstate.Store) *templateBuilds {
	ctx, cancel := context.WithCancel(context.Background())
	return &templateBuilds{store: store, ctx: ctx, cancel: cancel}
}

// close stops the running builds (each ends as an error) and releases the store.
func (t *templateBuilds) close() error {
	t.cancel()
	t.wg.Wait()
	return t.store.Close()
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
	b := buildstate.Record{Created: time.Now().UTC(), TemplateID: alias, Tags: tags}
	if req.CpuCount != nil {
		if b.CPU = *req.CpuCount; b.CPU < 1 {
			h.writeAPIError(w, r, http.StatusBadRequest, fmt.Sprintf("cpuCount %d: at least 1", b.CPU))
			return
		}
	}
	if req.MemoryMB != nil {
		if b.MemMB = *req.MemoryMB; b.MemMB < minTemplateMemoryMB {
			h.writeAPIError(w, r, http.StatusBadRequest, fmt.Sprintf("memoryMB %d: at least %d", b.MemMB, minTemplateMemoryMB))
			return
		}
	}
	buildID := newUUID()
	if err := h.tpl.store.Create(r.Context(), buildID, b); err != nil {
		h.writeErr(w, r, err)
		return
	}
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
	present, err := h.tpl.store.HasFiles(r.Context(), hash)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	if present {
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
	// The tar is checked and uncompressed here, then stored whole.
	f, err := os.CreateTemp("", "dsec-e2b-upload-*")
	if err != nil {
		h.writeErr(w, r, errdefs.Internal(err, "template upload"))
		return
	}
	defer func() { _ = f.Close(); _ = os.Remove(f.Name()) }()
	if _, err := copyTar(f, http.MaxBytesReader(w, r.Body, h.opts.MaxUploadBytes)); err != nil {
		h.writeErr(w, r, err)
		return
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		h.writeErr(w, r, errdefs.Internal(err, "template upload"))
		return
	}
	if err := h.tpl.store.PutFiles(r.Context(), hash, f, size); err != nil {
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
	b, err := h.tpl.store.Get(r.Context(), buildID)
	switch {
	case errdefs.Is(err, api.CodeNotFound) || err == nil && b.TemplateID != id:
		h.writeAPIError(w, r, http.StatusNotFound, fmt.Sprintf("build %q of template %q not found (request it with POST /v3/templates)", buildID, id))
		return
	case err != nil:
		h.writeErr(w, r, err)
		return
	case b.Status != e2bapi.TemplateBuildStatusWaiting:
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
	if b.CPU > 0 {
		tr.label(tplLabelCPU, strconv.Itoa(int(b.CPU)))
	}
	if b.MemMB > 0 {
		tr.label(tplLabelMemory, strconv.Itoa(int(b.MemMB)))
	}
	for _, hash := range tr.files {
		ok, err := h.tpl.store.HasFiles(r.Context(), hash)
		if err != nil {
			h.writeErr(w, r, err)
			return
		}
		if !ok {
			h.writeAPIError(w, r, http.StatusBadRequest, fmt.Sprintf("the files of hash %s were not uploaded (GET /templates/%s/files/%s gives the link)", hash, id, hash))
			return
		}
	}
	if err := h.tpl.store.Start(r.Context(), buildID); err != nil {
		h.writeErr(w, r, err)
		return
	}
	h.tpl.wg.Add(1)
	go func() {
		defer h.tpl.wg.Done()
		h.runTemplateBuild(h.tpl.ctx, id, buildID, b, tr)
	}()
	w.WriteHeader(http.StatusAccepted)
}

// logFlushInterval is how often a running build's new log entries are
// written to the build store (where status polls read them).
const logFlushInterval = 100 * time.Millisecond

// buildLog buffers a running build's log entries for the build store.
type buildLog struct {
	store   buildstate.Store
	id      string
	log     *slog.Logger
	mu      sync.Mutex
	pending []e2bapi.BuildLogEntry
	flushMu sync.Mutex // keeps flushes in order
}

func (l *buildLog) add(e e2bapi.BuildLogEntry) {
	l.mu.Lock()
	l.pending = append(l.pending, e)
	l.mu.Unlock()
}

func (l *buildLog) flush(ctx context.Context) {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	l.mu.Lock()
	p := l.pending
	l.pending = nil
	l.mu.Unlock()
	if len(p) == 0 {
		return
	}
	if err := l.store.Log(ctx, l.id, p...); err != nil {
		l.log.WarnContext(ctx, "e2b template build: log entries lost", "build", l.id, "entries", len(p), "err", err)
	}
}

// runTemplateBuild runs a translated build and records its outcome.
func (h *Handler) runTemplateBuild(ctx context.Context, id, buildID string, b buildstate.Record, tr translatedTemplate) {
	// The outcome is recorded also when ctx ends (this front end stops).
	rec, cancelRec := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancelRec()
	bl := &buildLog{store: h.tpl.store, id: buildID, log: h.log}
	flushed := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(flushed)
		t := time.NewTicker(logFlushInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				bl.flush(rec)
			}
		}
	}()
	logf := func(level e2bapi.LogLevel, step, msg string) e2bapi.BuildLogEntry {
		e := e2bapi.BuildLogEntry{Timestamp: time.Now().UTC(), Level: level, Message: msg}
		if step != "" {
			e.Step = &step
		}
		bl.add(e)
		return e
	}
	finish := func(status e2bapi.TemplateBuildStatus, reason *e2bapi.BuildStatusReason) {
		close(stop)
		<-flushed
		bl.flush(rec)
		if err := h.tpl.store.Finish(rec, buildID, status, reason); err != nil {
			h.log.WarnContext(rec, "e2b template build: recording its end", "template", id, "build", buildID, "status", status, "err", err)
		}
	}
	fail := func(step, msg string) {
		entries := []e2bapi.BuildLogEntry{logf(e2bapi.LogLevelError, step, msg)}
		reason := &e2bapi.BuildStatusReason{Message: msg, LogEntries: &entries}
		if step != "" {
			reason.Step = &step
		}
		finish(e2bapi.TemplateBuildStatusError, reason)
	}
	logf(e2bapi.LogLevelInfo, "base", "Building template "+id+" (build "+buildID+")")
	pr, pw := io.Pipe()
	open := func(hash string) (io.ReadCloser, error) { return h.tpl.store.OpenFiles(ctx, hash) }
	go func() { pw.CloseWithError(writeBuildContext(pw, tr.dockerfile, tr.files, open, tr.globs)) }()
	out := &logLines{emit: func(line string) { logf(e2bapi.LogLevelInfo, "", line) }}
	req := api.BuildImageRequest{Name: id, Output: out, CPU: float64(b.CPU), MemoryBytes: int64(b.MemMB) << 20,
		RegistryAuth: tr.auth}
	res, err := h.svc.BuildImage(session.WithoutStep(ctx), req, pr)
	out.flush()
	_ = pr.CloseWithError(io.ErrClosedPipe)
	h.templates.forget()
	if err != nil {
		step, msg := tr.explain(err)
		if ctx.Err() != nil {
			step, msg = "", "unavailable: the API server running the build stopped before the build ended"
		}
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
	for _, tag := range b.Tags {
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
	finish(e2bapi.TemplateBuildStatusReady, nil)
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
// uploaded under each hash (read with open) in files/HASH/.
func writeBuildContext(w io.Writer, dockerfile string, hashes []string, open func(hash string) (io.ReadCloser, error), globs []templateGlob) error {
	tw := tar.NewWriter(w)
	now := time.Now()
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile)), ModTime: now, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := io.WriteString(tw, dockerfile); err != nil {
		return err
	}
	for _, hash := range slices.Compact(slices.Sorted(slices.Values(hashes))) {
		dir := "files/" + hash
		if err := tw.WriteHeader(&tar.Header{Name: dir + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: now}); err != nil {
			return err
		}
		if err := addUploaded(tw, dir, hash, open, func(name string, _ byte) (string, bool) { return dir + "/" + name, true }); err != nil {
			return err
		}
	}
	for i, g := range globs {
		dir := "globs/" + strconv.Itoa(i)
		if err := tw.WriteHeader(&tar.Header{Name: dir + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: now}); err != nil {
			return err
		}
		err := addUploaded(tw, "files/"+g.hash, g.hash, open, func(name string, typ byte) (string, bool) {
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

// addUploaded adds the entries of the tar uploaded under hash that name maps
// (by their path and type), and the directory dir; hard links point into
// dir, where every entry of that tar is.
func addUploaded(tw *tar.Writer, dir, hash string, open func(string) (io.ReadCloser, error), name func(string, byte) (string, bool)) error {
	f, err := open(hash)
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
	b, err := h.tpl.store.Get(r.Context(), buildID)
	if err != nil && !errdefs.Is(err, api.CodeNotFound) {
		h.writeErr(w, r, err)
		return
	}
	var entries []e2bapi.BuildLogEntry
	if err == nil && b.TemplateID == id {
		if entries, err = h.tpl.store.Logs(r.Context(), buildID, offset); err != nil {
			h.writeErr(w, r, err)
			return
		}
	} else {
		// No record (past its retention): a finished build is its environment.
		img, err := h.templateImage(r.Context(), id)
		if err != nil {
			h.writeErr(w, r, err)
			return
		}
		if !isTemplate(img) || img.Config.Labels[tplLabelBuild] != buildID {
			h.writeAPIError(w, r, http.StatusNotFound, fmt.Sprintf("build %q of template %q not found", buildID, id))
			return
		}
		b = buildstate.Record{TemplateID: id, Status: e2bapi.TemplateBuildStatusReady}
	}
	if entries == nil {
		entries = []e2bapi.BuildLogEntry{}
	}
	lines := make([]string, 0, len(entries))
	for _, e := range entries {
		lines = append(lines, e.Timestamp.Format(time.RFC3339)+" "+e.Message)
	}
	writeJSON(w, http.StatusOK, e2bapi.TemplateBuildInfo{BuildID: buildID, TemplateID: id, Status: b.Status,
		LogEntries: entries, Logs: lines, Reason: b.Reason})
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

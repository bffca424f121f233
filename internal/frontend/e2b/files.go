package e2b

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// writeInfo is one entry of POST /files's answer.
type writeInfo struct {
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Path     string            `json:"path"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// filesStatus maps an FS error to /files's status (507 for a full disk, as envd).
func filesStatus(err error) int {
	if errdefs.Is(err, api.CodeResourceExhausted) {
		return http.StatusInsufficientStorage
	}
	return httpStatus(err)
}

func (h *Handler) filesError(w http.ResponseWriter, r *http.Request, err error) {
	h.writeAPIError(w, r, filesStatus(err), err.Error())
}

// readFile serves GET /files?path=P&username=U: the file's bytes.
func (h *Handler) readFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sandbox := r.Header.Get(SandboxIDHeader)
	fs, err := h.svc.FS(r.Context(), sandbox)
	if err != nil {
		h.filesError(w, r, err)
		return
	}
	defer fs.Close()
	a, err := h.lookupUser(r.Context(), fs, sandbox, fileUser(r))
	if err != nil {
		h.filesError(w, r, err)
		return
	}
	p, err := resolveHome(q.Get("path"), a.Home)
	if err != nil {
		h.filesError(w, r, err)
		return
	}
	rc, fi, err := fs.Open(r.Context(), p)
	if err != nil {
		if errdefs.Is(err, api.CodeNotFound) {
			h.writeAPIError(w, r, http.StatusNotFound, fmt.Sprintf("path '%s' does not exist", p))
			return
		}
		h.filesError(w, r, err)
		return
	}
	defer rc.Close()
	hd := w.Header()
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": path.Base(p)}))
	hd.Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, rc)
}

// writeFiles serves POST /files: a multipart form whose "file" parts carry
// their destination in the file name (or ?path= for one file), or one file as
// the raw body (application/octet-stream, ?path= required), optionally gzip.
func (h *Handler) writeFiles(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			h.writeAPIError(w, r, http.StatusBadRequest, "error decompressing request body: "+err.Error())
			return
		}
		defer zr.Close()
		body = zr
	}
	sandbox := r.Header.Get(SandboxIDHeader)
	fs, err := h.svc.FS(r.Context(), sandbox)
	if err != nil {
		h.filesError(w, r, err)
		return
	}
	defer fs.Close()
	a, err := h.lookupUser(r.Context(), fs, sandbox, fileUser(r))
	if err != nil {
		h.filesError(w, r, err)
		return
	}
	meta, err := uploadMetadata(r.Header)
	if err != nil {
		h.filesError(w, r, err)
		return
	}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var out []writeInfo
	switch mt {
	case "application/octet-stream":
		p, err := resolveHome(q.Get("path"), a.Home)
		if err != nil {
			h.filesError(w, r, err)
			return
		}
		kept, err := h.writeOne(r, fs, a, p, body, meta)
		if err != nil {
			h.filesError(w, r, err)
			return
		}
		out = append(out, writeInfo{Name: path.Base(p), Type: "file", Path: p, Metadata: kept})
	case "multipart/form-data":
		mr := multipart.NewReader(body, params["boundary"])
		seen := map[string]bool{}
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				h.writeAPIError(w, r, http.StatusBadRequest, "malformed multipart body: "+err.Error())
				return
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			dest := q.Get("path")
			if dest == "" {
				dest = partFileName(part)
			}
			p, err := resolveHome(dest, a.Home)
			if err != nil {
				h.filesError(w, r, err)
				return
			}
			if seen[p] {
				h.writeAPIError(w, r, http.StatusBadRequest, fmt.Sprintf("you cannot upload multiple files to the same path '%s' in one upload request", p))
				return
			}
			seen[p] = true
			kept, err := h.writeOne(r, fs, a, p, part, meta)
			part.Close()
			if err != nil {
				h.filesError(w, r, err)
				return
			}
			out = append(out, writeInfo{Name: path.Base(p), Type: "file", Path: p, Metadata: kept})
		}
		if len(out) == 0 {
			h.writeAPIError(w, r, http.StatusBadRequest, "no \"file\" part in the form")
			return
		}
	default:
		h.writeAPIError(w, r, http.StatusBadRequest, "Content-Type must be multipart/form-data or application/octet-stream")
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// partFileName is a part's file name with its directories (Part.FileName
// keeps only the base name, but E2B's SDKs send the full destination there).
func partFileName(part *multipart.Part) string {
	_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

// fileUser is the user a /files request names: ?username=, else the
// Authorization: Basic user (envd's order), else empty (the default user).
func fileUser(r *http.Request) string {
	if u := r.URL.Query().Get("username"); u != "" {
		return u
	}
	u, _ := userOf(r.Header)
	return u
}

// missingTop is the topmost directory of p's ancestors (p included) that does
// not exist, "" when p exists.
func missingTop(ctx context.Context, fs session.FS, p string) (string, error) {
	top := ""
	for at := p; at != "/"; at = path.Dir(at) {
		_, err := fs.Stat(ctx, at)
		if err == nil {
			break
		}
		if !errdefs.Is(err, api.CodeNotFound) {
			return "", err
		}
		top = at
	}
	return top, nil
}

// writeOne writes one file as a, creating its parent directories (owned by a,
// as envd creates them), with meta as its metadata (none when nil). It
// returns the metadata the file has (read back: a backend whose files do not
// keep extended attributes has none).
func (h *Handler) writeOne(r *http.Request, fs session.FS, a account, p string, body io.Reader, meta map[string]string) (map[string]string, error) {
	ctx := r.Context()
	if p == "/" {
		return nil, errdefs.Invalid("path is a directory: /")
	}
	aux := session.WithoutStep(ctx)
	sandbox := r.Header.Get(SandboxIDHeader)
	owned := p // what to give a: the file, or the topmost directory created for it
	if dir := path.Dir(p); dir != "/" {
		top, err := missingTop(aux, fs, dir)
		if err != nil {
			return nil, err
		}
		if top != "" {
			if _, err := fs.Mkdir(aux, dir, 0o755, true); err != nil && !errdefs.Is(err, api.CodeAlreadyExists) {
				return nil, err
			}
			owned = top
		}
	}
	if fi, err := fs.Stat(aux, p); err == nil && fi.Type == "dir" {
		return nil, errdefs.Invalid("path is a directory: %s", p)
	}
	if len(meta) == 0 {
		if _, err := fs.WriteFile(ctx, p, 0o644, body, h.opts.MaxUploadBytes); err != nil {
			return nil, err
		}
		return nil, h.chown(aux, sandbox, a, owned != p, owned)
	}
	if err := writeWithMetadata(ctx, fs, a, p, body, meta, h.opts.MaxUploadBytes); err != nil {
		return nil, err
	}
	if err := h.chown(aux, sandbox, a, owned != p, owned); err != nil {
		return nil, err
	}
	fi, err := fs.Stat(aux, p)
	if err != nil {
		return nil, err
	}
	return entryMetadata(fi.Xattrs), nil
}

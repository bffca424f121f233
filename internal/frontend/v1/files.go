package v1

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// ModeHeader carries a downloaded file's permission bits in octal ("0644").
const ModeHeader = "X-Dsec-Mode"

// withFS opens the sandbox's file system for one request and answers with fn's error.
func (s *Server) withFS(w http.ResponseWriter, r *http.Request, fn func(fs session.FS, path string) error) {
	path, err := queryPath(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	fs, err := s.svc.FS(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer fs.Close()
	if err := fn(fs, path); err != nil {
		s.writeError(w, r, err)
	}
}

// readFile handles GET .../files?path=P with the file's raw bytes.
func (s *Server) readFile(w http.ResponseWriter, r *http.Request) {
	s.withFS(w, r, func(fs session.FS, path string) error {
		rc, info, err := fs.Open(r.Context(), path)
		if err != nil {
			return fmt.Errorf("open %s: %w", path, err)
		}
		defer rc.Close()
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Length", strconv.FormatInt(info.Size, 10))
		h.Set(ModeHeader, fmt.Sprintf("%04o", info.Mode))
		if !info.ModTime.IsZero() {
			h.Set("Last-Modified", info.ModTime.UTC().Format(http.TimeFormat))
		}
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodHead {
			return nil
		}
		// The size was announced: a file that shrank meanwhile must cut the
		// response rather than end it cleanly, and one that grew is truncated.
		if _, err := io.CopyN(w, rc, info.Size); err != nil {
			s.log.DebugContext(r.Context(), "copying file", "path", path, "err", err)
			panic(http.ErrAbortHandler)
		}
		return nil
	})
}

// writeFile handles PUT .../files?path=P&mode=0644 with the raw body as content.
func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) {
	mode, err := parseMode(r.URL.Query().Get("mode"), 0o644)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.checkUpload(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxUploadBytes)
	s.withFS(w, r, func(fs session.FS, path string) error {
		info, err := fs.WriteFile(r.Context(), path, os.FileMode(mode), body, s.opts.MaxUploadBytes)
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	})
}

// checkUpload rejects uploads that announce a size over the limit before reading.
func (s *Server) checkUpload(r *http.Request) error {
	if r.ContentLength > s.opts.MaxUploadBytes {
		return api.NewError(api.CodePayloadTooLarge, "upload of %d bytes exceeds the limit of %d bytes",
			r.ContentLength, s.opts.MaxUploadBytes)
	}
	return nil
}

// removeFile handles DELETE .../files?path=P&recursive=true.
func (s *Server) removeFile(w http.ResponseWriter, r *http.Request) {
	recursive, err := queryBool(r, "recursive")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.withFS(w, r, func(fs session.FS, path string) error {
		if err := fs.Remove(r.Context(), path, recursive); err != nil {
			return fmt.Errorf("remove %s: %w", path, err)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

// mkdir handles POST .../files/mkdir (api.MkdirRequest; mode defaults to 0755).
func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) {
	var req api.MkdirRequest
	if err := s.decodeBody(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Path == "" {
		s.writeError(w, r, api.NewError(api.CodeInvalidArgument, "path is required"))
		return
	}
	if req.Mode > 0o7777 {
		s.writeError(w, r, api.NewError(api.CodeInvalidArgument, "mode %#o has bits beyond 07777", req.Mode))
		return
	}
	if req.Mode == 0 {
		req.Mode = 0o755
	}
	fs, err := s.svc.FS(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer fs.Close()
	if _, err := fs.Mkdir(r.Context(), req.Path, os.FileMode(req.Mode), req.Parents); err != nil {
		s.writeError(w, r, fmt.Errorf("mkdir %s: %w", req.Path, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listFiles handles GET .../files/list?path=P.
func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) {
	s.withFS(w, r, func(fs session.FS, path string) error {
		files, err := fs.List(r.Context(), path)
		if err != nil {
			return fmt.Errorf("list %s: %w", path, err)
		}
		if files == nil {
			files = []api.FileInfo{}
		}
		writeJSON(w, http.StatusOK, api.ListFilesResponse{Files: files})
		return nil
	})
}

// statFile handles GET .../files/stat?path=P.
func (s *Server) statFile(w http.ResponseWriter, r *http.Request) {
	s.withFS(w, r, func(fs session.FS, path string) error {
		info, err := fs.Stat(r.Context(), path)
		if err != nil {
			return fmt.Errorf("stat %s: %w", path, err)
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	})
}

// downloadArchive handles GET .../files/archive?path=P with an uncompressed tar.
// Errors before the first byte are JSON errors; later ones cut the response.
func (s *Server) downloadArchive(w http.ResponseWriter, r *http.Request) {
	s.withFS(w, r, func(fs session.FS, path string) error {
		lw := &lazyWriter{w: w, contentType: "application/x-tar"}
		if err := fs.WriteTar(r.Context(), path, lw); err != nil {
			if !lw.started {
				return fmt.Errorf("tar %s: %w", path, err)
			}
			s.log.DebugContext(r.Context(), "writing tar", "path", path, "err", err)
			panic(http.ErrAbortHandler)
		}
		lw.start() // an empty tar is still a 200
		return nil
	})
}

// uploadArchive handles PUT .../files/archive?path=P (tar or tar.gz body).
func (s *Server) uploadArchive(w http.ResponseWriter, r *http.Request) {
	if err := s.checkUpload(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxUploadBytes)
	s.withFS(w, r, func(fs session.FS, path string) error {
		if err := fs.ExtractTar(r.Context(), path, body); err != nil {
			return fmt.Errorf("extract tar into %s: %w", path, err)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

// lazyWriter sends the 200 header with the first byte, so an error that happens
// before any output can still become a proper error response.
type lazyWriter struct {
	w           http.ResponseWriter
	contentType string
	started     bool
}

func (l *lazyWriter) start() {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", l.contentType)
		l.w.WriteHeader(http.StatusOK)
	}
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	l.start()
	return l.w.Write(p)
}

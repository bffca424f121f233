package lazy

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/image/blob"
	"github.com/dsec-dev/dsec/pkg/api"
)

// FuzzControlAPI sends arbitrary requests to layerd's control API (what a node
// process sends over the unix socket). The daemon here has no FUSE mount and
// every blob store it opens is one empty directory, so nothing can be mounted:
// each request must answer 200 or a wire error with a machine-readable code, and
// leave no layer held.
func FuzzControlAPI(f *testing.F) {
	for _, s := range []struct {
		path string
		body string
	}{
		{"/acquire", `{"holder":"sb-1","layers":[{"digest":"sha256:` + strings.Repeat("ab", 32) + `","size":10,"store":"dir:/x"}]}`},
		{"/acquire", `{"holder":"","layers":[]}`},
		{"/acquire", `{"holder":"h","layers":[{"digest":"md5:x"}],"prefetch":"full"}`},
		{"/acquire", `{"holder":"h","layers":[{"digest":"sha256:../../etc"}]}`},
		{"/release", `{"Holder":"sb-1"}`},
		{"/sync", `{"Keep":["sb-1","sb-2"]}`},
		{"/sync", `{"Keep":null}`},
		{"/stats", ``},
		{"/ping", ``},
		{"/access/" + strings.Repeat("ab", 32), ``},
		{"/access/..%2f..", ``},
		{"/acquire", `[`},
	} {
		f.Add(s.path, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		if !strings.HasPrefix(path, "/") || strings.HasPrefix(path, "/exit") {
			return // /exit ends the process by design
		}
		root := t.TempDir()
		cache, err := NewCache(root+"/cache", 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		empty, err := blob.NewDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		d := &Daemon{cfg: Config{Root: root}, cache: cache, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			layers: map[string]*layerState{}, stores: map[string]blob.Store{},
			openStore: func(string) (blob.Store, error) { return empty, nil }}
		d.cfg.defaults()
		h := d.Handler()
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			req, err := http.NewRequest(method, "http://layerd"+path, strings.NewReader(string(body)))
			if err != nil {
				return
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			switch rec.Code {
			case 200, 404, 405, 301, 307, 308:
			case 500:
				var we wireErr
				if err := json.Unmarshal(rec.Body.Bytes(), &we); err != nil || we.Code == "" || we.Code == api.CodeInternal {
					t.Fatalf("%s %s %q: error answer %q", method, path, body, rec.Body.String())
				}
			default:
				t.Fatalf("%s %s %q: status %d %q", method, path, body, rec.Code, rec.Body.String())
			}
		}
		if st := d.Stats(); len(st.Layers) != 0 {
			t.Fatalf("layers held after %s %q: %+v", path, body, st.Layers)
		}
	})
}

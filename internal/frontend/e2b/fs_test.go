package e2b_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/internal/frontend/e2b"
	pb "github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/filesystem"
)

type writeInfo struct {
	Name, Type, Path string
}

// multipartBody builds the SDK's upload: one "file" part per entry, the full
// destination path as the file name.
func multipartBody(t *testing.T, files map[string][]byte) (string, []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for name, data := range files {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="file"; filename="`+name+`"`)
		h.Set("Content-Type", "application/octet-stream")
		w, _ := mw.CreatePart(h)
		_, _ = w.Write(data)
	}
	_ = mw.Close()
	return mw.FormDataContentType(), buf.Bytes()
}

func TestFilesUploadDownload(t *testing.T) {
	e := newEnv(t, func(o *e2b.Options) { o.MaxUploadBytes = 1 << 20 })
	c := e.create(nil)
	// Multipart with full destination paths (parents are created).
	bin := []byte{0, 1, 2, 255, 254, '\n'}
	ct, body := multipartBody(t, map[string][]byte{"/home/user/a/b.txt": []byte("hello"), "/tmp/bin.dat": bin, "rel.txt": []byte("r")})
	res, b := e.envdCall(c, "POST", "/files", ct, body)
	if res.StatusCode != 200 {
		t.Fatalf("upload %d %s", res.StatusCode, b)
	}
	infos := decode[[]writeInfo](t, b)
	paths := map[string]bool{}
	for _, wi := range infos {
		paths[wi.Path] = wi.Type == "file"
	}
	if len(infos) != 3 || !paths["/home/user/a/b.txt"] || !paths["/tmp/bin.dat"] || !paths["/root/rel.txt"] {
		t.Fatalf("upload answer %s", b)
	}
	res, b = e.envdCall(c, "GET", "/files?path=/tmp/bin.dat", "", nil)
	if res.StatusCode != 200 || !bytes.Equal(b, bin) || res.Header.Get("Content-Length") != "6" {
		t.Fatalf("download %d %q", res.StatusCode, b)
	}
	res, b = e.envdCall(c, "GET", "/files?path=rel.txt&username=root", "", nil)
	if string(b) != "r" {
		t.Fatalf("relative path: %d %q", res.StatusCode, b)
	}
	// ?path= with one part names the destination.
	ct, body = multipartBody(t, map[string][]byte{"ignored": []byte("x")})
	if res, b = e.envdCall(c, "POST", "/files?path=/tmp/named", ct, body); res.StatusCode != 200 || decode[[]writeInfo](t, b)[0].Path != "/tmp/named" {
		t.Fatalf("?path upload %d %s", res.StatusCode, b)
	}
	// Octet-stream, plain and gzip.
	big := bytes.Repeat([]byte("0123456789abcdef"), 40000)
	if res, b = e.envdCall(c, "POST", "/files?path=/tmp/big", "application/octet-stream", big); res.StatusCode != 200 {
		t.Fatalf("octet upload %d %s", res.StatusCode, b)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte("zipped"))
	_ = zw.Close()
	if res, b = e.envdCall(c, "POST", "/files?path=/tmp/z", "application/octet-stream", gz.Bytes(), "Content-Encoding", "gzip"); res.StatusCode != 200 {
		t.Fatalf("gzip upload %d %s", res.StatusCode, b)
	}
	if _, b = e.envdCall(c, "GET", "/files?path=/tmp/big", "", nil); !bytes.Equal(b, big) {
		t.Fatalf("big file: %d bytes back", len(b))
	}
	if _, b = e.envdCall(c, "GET", "/files?path=/tmp/z", "", nil); string(b) != "zipped" {
		t.Fatalf("gzip file: %q", b)
	}
	// Errors: missing file 404, directory 400, oversize 413, duplicate paths 400,
	// no path, bad content type, bad gzip; each with {code, message}.
	res, b = e.envdCall(c, "GET", "/files?path=/nope", "", nil)
	checkErr(t, res, b, 404)
	res, b = e.envdCall(c, "GET", "/files?path=/tmp", "", nil)
	checkErr(t, res, b, 400)
	res, b = e.envdCall(c, "GET", "/files", "", nil)
	checkErr(t, res, b, 400)
	res, b = e.envdCall(c, "POST", "/files?path=/tmp/huge", "application/octet-stream", make([]byte, 1<<20+1))
	checkErr(t, res, b, 413)
	res, b = e.envdCall(c, "POST", "/files?path=/tmp", "application/octet-stream", []byte("x"))
	checkErr(t, res, b, 400)
	res, b = e.envdCall(c, "POST", "/files?path=/tmp/x", "text/plain", []byte("x"))
	checkErr(t, res, b, 400)
	res, b = e.envdCall(c, "POST", "/files?path=/tmp/x", "application/octet-stream", []byte("x"), "Content-Encoding", "gzip")
	checkErr(t, res, b, 400)
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for range 2 {
		w, _ := mw.CreateFormFile("file", "/tmp/dup")
		_, _ = w.Write([]byte("d"))
	}
	_ = mw.Close()
	res, b = e.envdCall(c, "POST", "/files", mw.FormDataContentType(), buf.Bytes())
	checkErr(t, res, b, 400)
	res, b = e.envdCall(c, "POST", "/files", "multipart/form-data; boundary=zzz", []byte("garbage"))
	checkErr(t, res, b, 400)
	// "..": resolved inside the sandbox, never on the host.
	ct, body = multipartBody(t, map[string][]byte{"../../../../etc/evil": []byte("e")})
	if res, b = e.envdCall(c, "POST", "/files", ct, body); res.StatusCode != 200 || decode[[]writeInfo](t, b)[0].Path != "/etc/evil" {
		t.Fatalf("dot-dot upload: %d %s", res.StatusCode, b)
	}
	if _, b = e.envdCall(c, "GET", "/files?path=/tmp/../../../etc/hostname", "", nil); string(b) != "sandbox\n" {
		t.Fatalf("dot-dot read: %q", b)
	}
	res, b = e.envdCall(c, "GET", "/files?path=/etc/hostname&signature=v1_x", "", nil)
	checkErr(t, res, b, 401)
}

func TestFilesystemRPCs(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	for _, js := range []bool{true, false} {
		fs := e.filesystem(c, js)
		ctx := t.Context()
		dir := "/work"
		if !js {
			dir = "/work-bin"
		}
		md, err := fs.MakeDir(ctx, connect.NewRequest(&pb.MakeDirRequest{Path: dir + "/a/b"}))
		if err != nil || md.Msg.GetEntry().GetType() != pb.FileType_FILE_TYPE_DIRECTORY || md.Msg.GetEntry().GetPath() != dir+"/a/b" {
			t.Fatalf("mkdir %v %v", md, err)
		}
		_, err = fs.MakeDir(ctx, connect.NewRequest(&pb.MakeDirRequest{Path: dir + "/a/b"}))
		if connect.CodeOf(err) != connect.CodeAlreadyExists {
			t.Fatalf("mkdir twice: %v", err)
		}
		_, err = fs.MakeDir(ctx, connect.NewRequest(&pb.MakeDirRequest{Path: "/etc/hostname"}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("mkdir over a file: %v", err)
		}
		e.envdCall(c, "POST", "/files?path="+dir+"/a/f.txt", "application/octet-stream", []byte("12345"))
		st, err := fs.Stat(ctx, connect.NewRequest(&pb.StatRequest{Path: dir + "/a/f.txt"}))
		if err != nil || st.Msg.GetEntry().GetSize() != 5 || st.Msg.GetEntry().GetType() != pb.FileType_FILE_TYPE_FILE ||
			st.Msg.GetEntry().GetName() != "f.txt" || st.Msg.GetEntry().GetMode() != 0o644 || st.Msg.GetEntry().GetOwner() != "root" {
			t.Fatalf("stat %v %v", st, err)
		}
		_, err = fs.Stat(ctx, connect.NewRequest(&pb.StatRequest{Path: dir + "/nope"}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("stat missing: %v", err)
		}
		ls, err := fs.ListDir(ctx, connect.NewRequest(&pb.ListDirRequest{Path: dir, Depth: 1}))
		if err != nil || len(ls.Msg.Entries) != 1 || ls.Msg.Entries[0].GetPath() != dir+"/a" {
			t.Fatalf("ls depth 1: %v %v", ls, err)
		}
		ls, err = fs.ListDir(ctx, connect.NewRequest(&pb.ListDirRequest{Path: dir, Depth: 3}))
		if err != nil || len(ls.Msg.Entries) != 3 {
			t.Fatalf("ls depth 3: %v %v", ls, err)
		}
		_, err = fs.ListDir(ctx, connect.NewRequest(&pb.ListDirRequest{Path: "/etc/hostname"}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("ls a file: %v", err)
		}
		_, err = fs.ListDir(ctx, connect.NewRequest(&pb.ListDirRequest{Path: "/nope"}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("ls missing: %v", err)
		}
		mv, err := fs.Move(ctx, connect.NewRequest(&pb.MoveRequest{Source: dir + "/a/f.txt", Destination: dir + "/g.txt"}))
		if err != nil || mv.Msg.GetEntry().GetPath() != dir+"/g.txt" || mv.Msg.GetEntry().GetSize() != 5 {
			t.Fatalf("move %v %v", mv, err)
		}
		_, err = fs.Move(ctx, connect.NewRequest(&pb.MoveRequest{Source: dir + "/a/f.txt", Destination: dir + "/h"}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("move missing: %v", err)
		}
		if _, err := fs.Remove(ctx, connect.NewRequest(&pb.RemoveRequest{Path: dir})); err != nil {
			t.Fatal(err)
		}
		if _, err := fs.Remove(ctx, connect.NewRequest(&pb.RemoveRequest{Path: dir})); err != nil {
			t.Fatalf("remove missing: %v", err)
		}
		_, err = fs.Remove(ctx, connect.NewRequest(&pb.RemoveRequest{Path: "/../.."}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("remove /: %v", err)
		}
		_, err = fs.Stat(ctx, connect.NewRequest(&pb.StatRequest{Path: ""}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("empty path: %v", err)
		}
	}
}

func TestWatchDir(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	fs := e.filesystem(c, true)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	fs.MakeDir(ctx, connect.NewRequest(&pb.MakeDirRequest{Path: "/w/sub"}))
	st, err := fs.WatchDir(ctx, connect.NewRequest(&pb.WatchDirRequest{Path: "/w", Recursive: true, IncludeEntry: true}))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() || st.Msg().GetStart() == nil {
		t.Fatalf("no start event: %v", st.Err())
	}
	e.envdCall(c, "POST", "/files?path=/w/sub/new.txt", "application/octet-stream", []byte("x"))
	want := map[string]pb.EventType{"sub/new.txt": pb.EventType_EVENT_TYPE_CREATE}
	got := map[string]pb.EventType{}
	for len(got) < len(want) && st.Receive() {
		if ev := st.Msg().GetFilesystem(); ev != nil {
			if _, ok := got[ev.GetName()]; !ok {
				got[ev.GetName()] = ev.GetType()
			}
			if ev.GetEntry().GetPath() != "/w/"+ev.GetName() {
				t.Fatalf("entry %v", ev)
			}
		}
	}
	if got["sub/new.txt"] != pb.EventType_EVENT_TYPE_CREATE {
		t.Fatalf("events %v", got)
	}
	e.envdCall(c, "POST", "/files?path=/w/sub/new.txt", "application/octet-stream", []byte("longer"))
	for st.Receive() {
		if ev := st.Msg().GetFilesystem(); ev != nil && ev.GetType() == pb.EventType_EVENT_TYPE_WRITE {
			break
		}
	}
	fs.Remove(ctx, connect.NewRequest(&pb.RemoveRequest{Path: "/w/sub/new.txt"}))
	for st.Receive() {
		if ev := st.Msg().GetFilesystem(); ev != nil && ev.GetType() == pb.EventType_EVENT_TYPE_REMOVE && ev.GetName() == "sub/new.txt" {
			break
		}
	}
	if st.Err() != nil {
		t.Fatal(st.Err())
	}
	cancel()
	st, _ = e.filesystem(c, false).WatchDir(t.Context(), connect.NewRequest(&pb.WatchDirRequest{Path: "/nope"}))
	if st.Receive() || connect.CodeOf(st.Err()) != connect.CodeNotFound {
		t.Fatalf("watch missing: %v", st.Err())
	}
	st, _ = e.filesystem(c, false).WatchDir(t.Context(), connect.NewRequest(&pb.WatchDirRequest{Path: "/etc/hostname"}))
	if st.Receive() || connect.CodeOf(st.Err()) != connect.CodeInvalidArgument {
		t.Fatalf("watch a file: %v", st.Err())
	}
}

func TestPollingWatcher(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	fs := e.filesystem(c, true)
	ctx := t.Context()
	fs.MakeDir(ctx, connect.NewRequest(&pb.MakeDirRequest{Path: "/p"}))
	cw, err := fs.CreateWatcher(ctx, connect.NewRequest(&pb.CreateWatcherRequest{Path: "/p"}))
	if err != nil || cw.Msg.GetWatcherId() == "" {
		t.Fatal(err)
	}
	id := cw.Msg.GetWatcherId()
	e.envdCall(c, "POST", "/files?path=/p/a", "application/octet-stream", []byte("a"))
	var names []string
	waitFor(t, 3*time.Second, func() bool {
		ev, err := fs.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ev.Msg.Events {
			names = append(names, x.GetType().String()+" "+x.GetName())
		}
		return len(names) > 0
	})
	if names[0] != "EVENT_TYPE_CREATE a" {
		t.Fatalf("events %v", names)
	}
	// Another sandbox cannot read or remove it.
	other := e.create(nil)
	_, err = e.filesystem(other, true).GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("foreign watcher: %v", err)
	}
	if _, err := fs.RemoveWatcher(ctx, connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	_, err = fs.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("removed watcher: %v", err)
	}
	_, err = fs.CreateWatcher(ctx, connect.NewRequest(&pb.CreateWatcherRequest{Path: "/nope"}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("watcher on missing dir: %v", err)
	}
	// Watchers per sandbox are bounded; another sandbox is not affected.
	for i := 0; ; i++ {
		_, err := fs.CreateWatcher(ctx, connect.NewRequest(&pb.CreateWatcherRequest{Path: "/p"}))
		if err != nil {
			if connect.CodeOf(err) != connect.CodeResourceExhausted || i != 64 {
				t.Fatalf("watcher %d: %v", i, err)
			}
			break
		}
	}
	if _, err := e.filesystem(other, true).CreateWatcher(ctx, connect.NewRequest(&pb.CreateWatcherRequest{Path: "/etc"})); err != nil {
		t.Fatalf("other sandbox: %v", err)
	}
}

// The JSON EntryInfo of ListDir, as E2B's JS SDK reads it.
func TestListDirJSONShape(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	sfs, err := e.n.FS(t.Context(), c.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	defer sfs.Close()
	if _, err := sfs.Mkdir(t.Context(), "/opt/etc", 0o755, true); err != nil {
		t.Fatal(err)
	}
	if _, err := sfs.WriteFile(t.Context(), "/opt/etc/hostname", 0o644, strings.NewReader("fake\n"), 1<<20); err != nil {
		t.Fatal(err)
	}
	res, b := e.envdCall(c, "POST", "/filesystem.Filesystem/ListDir", "application/json", []byte(`{"path":"/opt/etc","depth":1}`))
	if res.StatusCode != 200 {
		t.Fatalf("%d %s", res.StatusCode, b)
	}
	var out struct {
		Entries []map[string]any `json:"entries"`
	}
	if err := json.Unmarshal(b, &out); err != nil || len(out.Entries) != 1 {
		t.Fatalf("%s", b)
	}
	en := out.Entries[0]
	if en["name"] != "hostname" || en["path"] != "/opt/etc/hostname" || en["size"] != "5" || en["type"] != "FILE_TYPE_FILE" || !strings.HasPrefix(en["permissions"].(string), "-rw") {
		t.Fatalf("entry %v", en)
	}
	res, b = e.envdCall(c, "POST", "/filesystem.Filesystem/ListDir", "application/json", []byte(`{"path":"/etc","depth":"x"}`))
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad depth: %d %s", res.StatusCode, b)
	}
}

// A polling watcher is its service's: one created through one front end is read
// and removed through another (another API server), and the first one going
// away changes nothing.
func TestPollingWatcherAcrossFrontEnds(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	ctx := t.Context()
	fs := e.filesystem(c, true)
	fs.MakeDir(ctx, connect.NewRequest(&pb.MakeDirRequest{Path: "/p"}))
	cw, err := fs.CreateWatcher(ctx, connect.NewRequest(&pb.CreateWatcherRequest{Path: "/p", IncludeEntry: true}))
	if err != nil {
		t.Fatal(err)
	}
	h2 := e2b.New(e.n, e2b.Options{Authorize: func(k string) bool { return k == testKey }, Secret: []byte("test")})
	srv2 := httptest.NewServer(h2)
	defer func() { srv2.Close(); h2.Close() }()
	other := &env{t: t, n: e.n, h: h2, srv: srv2}
	e.srv.Close()
	e.h.Close()
	other.envdCall(c, "POST", "/files?path=/p/a", "application/octet-stream", []byte("abc"))
	ev, err := other.filesystem(c, true).GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: cw.Msg.GetWatcherId()}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range ev.Msg.Events {
		got = append(got, x.GetType().String()+" "+x.GetName()+" "+x.GetEntry().GetPath())
	}
	if strings.Join(got, ",") != "EVENT_TYPE_CREATE a /p/a,EVENT_TYPE_WRITE a /p/a" {
		t.Fatalf("events through the other front end: %v", got)
	}
	if _, err := other.filesystem(c, false).RemoveWatcher(ctx, connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: cw.Msg.GetWatcherId()})); err != nil {
		t.Fatal(err)
	}
	_, err = other.filesystem(c, true).GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: cw.Msg.GetWatcherId()}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("removed watcher: %v", err)
	}
}

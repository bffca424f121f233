package e2b_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/filesystem"
	procpb "github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/process"
)

const testPasswd = "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\nbob:x:1001:1002::/srv/bob:/bin/sh\n"

// withAccounts gives sandbox id E2B base's accounts (root, user) and bob.
func (e *env) withAccounts(id string) {
	e.t.Helper()
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	s := e.f.sandboxes[id]
	for _, d := range []string{"/etc", "/home", "/home/user", "/srv", "/srv/bob", "/root"} {
		s.files[d] = &fakeFile{dir: true, mode: 0o755, mtime: time.Now()}
	}
	s.files["/etc/passwd"] = &fakeFile{data: []byte(testPasswd), mode: 0o644, mtime: time.Now()}
}

func (e *env) chowns() []string {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	return slices.Clone(e.f.chowns)
}

func basicUser(u string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"))
}

// runOut runs script through Process.Start and returns its stdout.
func runOut(t *testing.T, pc interface {
	Start(context.Context, *connect.Request[procpb.StartRequest]) (*connect.ServerStreamForClient[procpb.StartResponse], error)
}, script string) string {
	t.Helper()
	st, err := pc.Start(context.Background(), connect.NewRequest(&procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", script}}}))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for st.Receive() {
		if d := st.Msg().GetEvent().GetData(); d != nil {
			out.Write(d.GetStdout())
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestDefaultUserIsE2BUser(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	e.withAccounts(c.SandboxID)

	// Commands run as user in /home/user, with its environment.
	if got := runOut(t, e.process(c, false), "env USER; env HOME; pwd"); got != "user\n/home/user\n/home/user\n" {
		t.Fatalf("default user's command printed %q", got)
	}
	// Authorization: Basic names another user.
	if got := runOut(t, e.process(c, false, "Authorization", basicUser("root")), "env USER; pwd"); got != "root\n/root\n" {
		t.Fatalf("root's command printed %q", got)
	}

	// A relative upload lands in user's home and is given to user, with the
	// directories created for it.
	ct, body := multipartBody(t, map[string][]byte{"a/b/c.txt": []byte("x")})
	res, b := e.envdCall(c, "POST", "/files", ct, body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("upload %d %s", res.StatusCode, b)
	}
	if infos := decode[[]writeInfo](t, b); len(infos) != 1 || infos[0].Path != "/home/user/a/b/c.txt" {
		t.Fatalf("upload answer %s", b)
	}
	if got := e.chowns(); !slices.Equal(got, []string{"-R -h 1000:1000 -- /home/user/a"}) {
		t.Fatalf("chowns after upload: %q", got)
	}
	// ?username= names the owner (bob's home comes from /etc/passwd).
	ct, body = multipartBody(t, map[string][]byte{"f.txt": []byte("y")})
	res, b = e.envdCall(c, "POST", "/files?username=bob", ct, body)
	if res.StatusCode != http.StatusOK || !strings.Contains(string(b), `"/srv/bob/f.txt"`) {
		t.Fatalf("bob's upload %d %s", res.StatusCode, b)
	}
	if got := e.chowns(); len(got) != 2 || got[1] != "-h 1001:1002 -- /srv/bob/f.txt" {
		t.Fatalf("chowns after bob's upload: %q", got)
	}
	// root's files need no chown; reads resolve under the user's home.
	ct, body = multipartBody(t, map[string][]byte{"r.txt": []byte("z")})
	if res, b = e.envdCall(c, "POST", "/files?username=root", ct, body); res.StatusCode != http.StatusOK || len(e.chowns()) != 2 {
		t.Fatalf("root's upload %d %s, chowns %q", res.StatusCode, b, e.chowns())
	}
	if res, b = e.envdCall(c, "GET", "/files?path=a/b/c.txt", "", nil); res.StatusCode != http.StatusOK || string(b) != "x" {
		t.Fatalf("read back %d %q", res.StatusCode, b)
	}
	// An unknown user is refused, nothing written.
	ct, body = multipartBody(t, map[string][]byte{"/tmp/n.txt": []byte("n")})
	if res, b = e.envdCall(c, "POST", "/files?username=nosuch", ct, body); res.StatusCode != http.StatusBadRequest {
		t.Fatalf("unknown user's upload %d %s", res.StatusCode, b)
	}
	if res, _ = e.envdCall(c, "GET", "/files?path=/tmp/n.txt&username=root", "", nil); res.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown user's file exists: %d", res.StatusCode)
	}

	// MakeDir gives the directories it creates to the user.
	fc := e.filesystem(c, false)
	d, err := fc.MakeDir(context.Background(), connect.NewRequest(&fspb.MakeDirRequest{Path: "x/y"}))
	if err != nil || d.Msg.GetEntry().GetPath() != "/home/user/x/y" {
		t.Fatalf("MakeDir: %v %v", d, err)
	}
	if got := e.chowns(); len(got) != 3 || got[2] != "-R -h 1000:1000 -- /home/user/x" {
		t.Fatalf("chowns after MakeDir: %q", got)
	}
}

func TestNoUserAccountRunsAsRoot(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil) // the fake's sandbox has no /etc/passwd
	if got := runOut(t, e.process(c, false), "env USER; pwd"); got != "root\n/root\n" {
		t.Fatalf("command printed %q", got)
	}
	ct, body := multipartBody(t, map[string][]byte{"rel.txt": []byte("r")})
	if res, b := e.envdCall(c, "POST", "/files", ct, body); res.StatusCode != http.StatusOK || !strings.Contains(string(b), `"/root/rel.txt"`) || len(e.chowns()) != 0 {
		t.Fatalf("upload %d %s, chowns %q", res.StatusCode, b, e.chowns())
	}
}

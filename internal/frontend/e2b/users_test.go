package e2b_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	fspb "github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/filesystem"
	procpb "github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/process"
)

const testPasswd = "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\nbob:x:1001:1002::/srv/bob:/bin/sh\n"

// withAccounts gives sandbox id E2B base's accounts (root, user) and bob.
func (e *env) withAccounts(id string) {
	e.t.Helper()
	fs, err := e.n.FS(e.t.Context(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	defer fs.Close()
	for _, d := range []string{"/etc", "/home/user", "/srv/bob", "/root"} {
		if _, err := fs.Mkdir(e.t.Context(), d, 0o755, true); err != nil {
			e.t.Fatal(err)
		}
	}
	if _, err := fs.WriteFile(e.t.Context(), "/etc/passwd", 0o644, strings.NewReader(testPasswd), 1<<20); err != nil {
		e.t.Fatal(err)
	}
}

// chowns returns the arguments of every chown the front end ran.
func (e *env) chowns() []string { return e.steps.chownsRun() }

// owner returns the owner of path in sandbox id, as "UID:GID".
func (e *env) owner(id, path string) string {
	e.t.Helper()
	st, err := os.Lstat(filepath.Join(e.n.Root(id), path))
	if err != nil {
		e.t.Fatal(err)
	}
	s := st.Sys().(*syscall.Stat_t)
	return fmt.Sprintf("%d:%d", s.Uid, s.Gid)
}

// owners checks the owners of paths in sandbox id (path, "UID:GID", ...).
func (e *env) owners(id string, want ...string) {
	e.t.Helper()
	for i := 0; i+1 < len(want); i += 2 {
		if got := e.owner(id, want[i]); got != want[i+1] {
			e.t.Errorf("%s is owned by %s, want %s", want[i], got, want[i+1])
		}
	}
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
	if got := runOut(t, e.process(c, false), "echo $USER; echo $HOME; pwd"); got != "user\n/home/user\n/home/user\n" {
		t.Fatalf("default user's command printed %q", got)
	}
	// Authorization: Basic names another user.
	if got := runOut(t, e.process(c, false, "Authorization", basicUser("root")), "echo $USER; pwd"); got != "root\n/root\n" {
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
	e.owners(c.SandboxID, "/home/user", "0:0", "/home/user/a", "1000:1000", "/home/user/a/b", "1000:1000", "/home/user/a/b/c.txt", "1000:1000")
	// ?username= names the owner (bob's home comes from /etc/passwd).
	ct, body = multipartBody(t, map[string][]byte{"f.txt": []byte("y")})
	res, b = e.envdCall(c, "POST", "/files?username=bob", ct, body)
	if res.StatusCode != http.StatusOK || !strings.Contains(string(b), `"/srv/bob/f.txt"`) {
		t.Fatalf("bob's upload %d %s", res.StatusCode, b)
	}
	if got := e.chowns(); len(got) != 2 || got[1] != "-h 1001:1002 -- /srv/bob/f.txt" {
		t.Fatalf("chowns after bob's upload: %q", got)
	}
	e.owners(c.SandboxID, "/srv/bob", "0:0", "/srv/bob/f.txt", "1001:1002")
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
	e.owners(c.SandboxID, "/home/user/x", "1000:1000", "/home/user/x/y", "1000:1000")
}

func TestNoUserAccountRunsAsRoot(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	fs, err := e.n.FS(t.Context(), c.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	if err := fs.Remove(t.Context(), "/etc/passwd", false); err != nil {
		t.Fatal(err)
	}
	if got := runOut(t, e.process(c, false), "echo $USER; pwd"); got != "root\n/root\n" {
		t.Fatalf("command printed %q", got)
	}
	ct, body := multipartBody(t, map[string][]byte{"rel.txt": []byte("r")})
	if res, b := e.envdCall(c, "POST", "/files", ct, body); res.StatusCode != http.StatusOK || !strings.Contains(string(b), `"/root/rel.txt"`) || len(e.chowns()) != 0 {
		t.Fatalf("upload %d %s, chowns %q", res.StatusCode, b, e.chowns())
	}
}

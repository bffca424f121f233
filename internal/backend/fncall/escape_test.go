package fncall

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

// statusProgram prints the seccomp, no_new_privs and capability lines of
// its own /proc/self/status.
const statusProgram = `#include <stdio.h>
#include <string.h>
int main(void) {
	char line[256];
	FILE *f = fopen("/proc/self/status", "r");
	if (!f) { puts("no status"); return 1; }
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, "Seccomp:", 8) || !strncmp(line, "NoNewPrivs:", 11) || !strncmp(line, "CapEff:", 7))
			fputs(line, stdout);
	return 0;
}
`

// TestRunHasSeccompAndNoNewPrivs reads the filter mode and no_new_privs
// from inside a run. The test process itself has neither, so the check
// tells a run without them apart.
func TestRunHasSeccompAndNoNewPrivs(t *testing.T) {
	e := testEngine(t)
	res := mustCall(t, e, cCall(statusProgram, "", api.FnCallLimits{}))
	out := res.Tests[0].Stdout
	for _, want := range []string{"Seccomp:\t2\n", "NoNewPrivs:\t1\n", "CapEff:\t0000000000000000\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("run status lacks %q:\n%s", want, out)
		}
	}
	self, _ := os.ReadFile("/proc/self/status")
	if strings.Contains(string(self), "Seccomp:\t2\n") {
		t.Fatal("the test process itself runs under seccomp: the check cannot tell")
	}
}

// TestCompileCannotReadHostFiles: the compiler runs in the sandbox, so an
// #include or .incbin of a file that exists only on the host fails, while
// the same directives on a file of the image compile (so the check can
// fail).
func TestCompileCannotReadHostFiles(t *testing.T) {
	e := testEngine(t)
	host, err := os.CreateTemp("/tmp", "dsec-host-only-*.h")
	if err != nil {
		t.Fatal(err)
	}
	host.WriteString("int host_secret = 42;\n")
	host.Close()
	defer os.Remove(host.Name())
	include := func(path string) string {
		return fmt.Sprintf("#include \"%s\"\nint main(void) { return 0; }\n", path)
	}
	incbin := func(path string) string {
		return fmt.Sprintf("__asm__(\".section .rodata\\n.incbin \\\"%s\\\"\\n.previous\");\nint main(void) { return 0; }\n", path)
	}
	for _, c := range []struct {
		name, src string
		want      string
	}{
		{"include host file", include(host.Name()), api.VerdictCompileError},
		{"incbin host file", incbin(host.Name()), api.VerdictCompileError},
		{"include host /etc/shadow through /proc/1/root", include("/proc/1/root/etc/shadow"), api.VerdictCompileError},
		{"include image file", include("/usr/include/stdio.h"), api.VerdictAccepted},
		{"incbin image file", incbin("/etc/hostname"), api.VerdictAccepted},
	} {
		res, err := e.Call(context.Background(), cCall(c.src, "", api.FnCallLimits{}))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := res.Verdict
		if res.Compile != nil && res.Compile.Verdict != api.VerdictAccepted {
			got = res.Compile.Verdict
		}
		if got != c.want {
			t.Errorf("%s: verdict %s, want %s (compile %+v)", c.name, got, c.want, res.Compile)
		}
		if strings.Contains(fmt.Sprint(res), "host_secret") {
			t.Errorf("%s: host file content in the result", c.name)
		}
	}
}

// TestHostLoopbackUnreachable: a listener on the host's loopback (which the
// host reaches) cannot be reached from a run.
func TestHostLoopbackUnreachable(t *testing.T) {
	e := testEngine(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("host"))
			c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	if c, err := net.Dial("tcp", l.Addr().String()); err != nil {
		t.Fatalf("the host cannot reach its own listener: %v", err)
	} else {
		c.Close()
	}
	src := fmt.Sprintf(`#include <stdio.h>
#include <errno.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>
int main(void) {
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(%d)};
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0) { printf("socket: %%s\n", strerror(errno)); return 0; }
	if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) { char b[8] = {0}; read(s, b, 4); printf("connected %%s\n", b); return 0; }
	printf("refused: %%s\n", strerror(errno));
	return 0;
}
`, port)
	res := mustCall(t, e, cCall(src, "", api.FnCallLimits{}))
	out := res.Tests[0].Stdout
	if strings.Contains(out, "connected") || !(strings.HasPrefix(out, "refused") || strings.HasPrefix(out, "socket")) {
		t.Fatalf("host loopback listener reachable from a run: %q", out)
	}
	t.Logf("from a run: %s", strings.TrimSpace(out))
}

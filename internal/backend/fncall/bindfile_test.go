package fncall

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

// tamperer, run with stdin "attack", tries every way a run could change its
// own program for later runs; each line is "what ok" or "what ERRNO". It
// first says whether its program is a mount of its own (a bind, not a copy).
const tamperer = `#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
static void say(const char *what, int rc) { printf("%s %s\n", what, rc < 0 ? strerrorname_np(errno) : "ok"); }
/* in a child: the seccomp filter may kill a caller of mount calls */
static void try_mount(const char *what, int remount) {
	pid_t p = fork();
	if (p == 0) {
		int rc = remount ? mount(NULL, "/w/.bin/main", NULL, MS_REMOUNT | MS_BIND, NULL) : umount2("/w/.bin/main", MNT_DETACH);
		_exit(rc < 0 ? 100 + (errno & 63) : 0);
	}
	int st = 0;
	waitpid(p, &st, 0);
	if (WIFSIGNALED(st)) printf("%s killed\n", what);
	else if (WEXITSTATUS(st) == 0) printf("%s ok\n", what);
	else printf("%s %s\n", what, strerrorname_np(WEXITSTATUS(st) - 100));
}
int main(void) {
	setvbuf(stdout, NULL, _IONBF, 0);
	char in[16] = {0};
	if (!fgets(in, sizeof in, stdin) || strncmp(in, "attack", 6)) { puts("intact"); return 0; }
	struct stat w, b;
	stat("/w", &w); stat("/w/.bin/main", &b);
	printf("bind %d\n", w.st_dev != b.st_dev);
	int fd = open("/w/.bin/main", O_WRONLY);
	say("open-write", fd);
	if (fd >= 0) say("write", (int)write(fd, "x", 1));
	say("chmod", chmod("/w/.bin/main", 0777));
	say("truncate", truncate("/w/.bin/main", 0));
	try_mount("umount", 0);
	say("rename", rename("/w/.bin/main", "/w/moved"));
	say("unlink", unlink("/w/.bin/main"));
	try_mount("remount", 1);
	return 0;
}
`

// TestCompiledProgramIsBoundReadOnly: a compiled program reaches its run as a
// read-only bind mount of the compile cache's file (no copy), and nothing the
// run tries changes that file for later runs.
func TestCompiledProgramIsBoundReadOnly(t *testing.T) {
	e := testEngine(t)
	req := cCall(tamperer, "hello", api.FnCallLimits{})
	if res := mustCall(t, e, req); res.Tests[0].Stdout != "intact\n" {
		t.Fatalf("first run: %+v", res.Tests[0])
	}
	bin, err := e.CompiledBinary(api.LangC, req.Files, "")
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	req.Tests = []api.FnCallTest{{Stdin: "attack"}}
	res := mustCall(t, e, req)
	out := res.Tests[0].Stdout
	if !strings.HasPrefix(out, "bind 1\n") {
		t.Fatalf("the run's program is not a mount of its own (a copy?): %+v", res.Tests[0])
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		if strings.HasSuffix(line, " ok") {
			t.Errorf("the run could %s its cached program", strings.TrimSuffix(line, " ok"))
		}
	}
	if !strings.Contains(out, "unlink EBUSY") {
		t.Errorf("tamper attempts: %+v", res.Tests[0])
	}
	// The next run of the same program (a cache hit) runs it as compiled.
	req.Tests = []api.FnCallTest{{Stdin: "again"}}
	res = mustCall(t, e, req)
	if res.Compile == nil || !res.Compile.Cached || res.Tests[0].Stdout != "intact\n" {
		t.Errorf("next run: compile %+v, stdout %q", res.Compile, res.Tests[0].Stdout)
	}
	after, err := os.ReadFile(bin)
	if err != nil || !bytes.Equal(before, after) {
		t.Errorf("the cached program changed (%d bytes, was %d): %v", len(after), len(before), err)
	}
}

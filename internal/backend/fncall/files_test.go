package fncall

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

// TestRunFiles: the files of a call are in /w with their modes, owned by the
// run's uid and gid like /w itself, and the program runs with umask 022 (the
// helper that copies the files uses its own umask and file system ids).
func TestRunFiles(t *testing.T) {
	e := testEngine(t)
	for range 3 { // the first run on a slot and prepared ones
		r, err := e.Call(context.Background(), api.FnCallRequest{
			Cmd:   []string{"/bin/sh", "-c", "id -u; id -g; umask; touch /w/new; stat -c '%n %u %g %a' /w /w/a.sh /w/d /w/d/b.txt /w/tmp /w/new"},
			Files: map[string]string{"a.sh": "#!/bin/sh\n", "d/b.txt": "x"}, Tests: []api.FnCallTest{{}}})
		if err != nil || r.Verdict != api.VerdictAccepted {
			t.Fatalf("%v %+v", err, r)
		}
		lines := strings.Split(strings.TrimSpace(r.Tests[0].Stdout), "\n")
		if len(lines) != 9 {
			t.Fatalf("output %q", r.Tests[0].Stdout)
		}
		uid, gid := lines[0], lines[1]
		if uid == "0" || gid == "0" {
			t.Fatalf("the program runs as %s:%s", uid, gid)
		}
		want := []string{"0022",
			fmt.Sprintf("/w %s %s 755", uid, gid), fmt.Sprintf("/w/a.sh %s %s 755", uid, gid),
			fmt.Sprintf("/w/d %s %s 755", uid, gid), fmt.Sprintf("/w/d/b.txt %s %s 644", uid, gid),
			fmt.Sprintf("/w/tmp %s %s 1777", uid, gid), fmt.Sprintf("/w/new %s %s 644", uid, gid)}
		if got := lines[2:]; strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

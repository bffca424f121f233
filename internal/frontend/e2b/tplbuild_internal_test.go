package e2b

import (
	"slices"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
)

// A RUN's output becomes one log entry per line as the line ends, whatever
// the writes' boundaries; an unterminated last line at flush; an endless
// line in pieces.
func TestLogLines(t *testing.T) {
	var got []string
	l := &logLines{emit: func(s string) { got = append(got, s) }}
	for _, w := range []string{"fir", "st\nsec", "ond\r\n", "\nthird"} {
		_, _ = l.Write([]byte(w))
	}
	if want := []string{"first", "second", ""}; !slices.Equal(got, want) {
		t.Fatalf("before flush %q, want %q", got, want)
	}
	l.flush()
	if got[len(got)-1] != "third" {
		t.Fatalf("after flush %q", got)
	}
	got = nil
	_, _ = l.Write([]byte(strings.Repeat("x", maxLogLine+1)))
	if len(got) != 1 || len(got[0]) != maxLogLine {
		t.Fatalf("a long line: %d entries", len(got))
	}
}

// force (the build's or a step's) puts a label naming the build before the
// forced step, once: every later step's cache key changes, earlier ones
// keep theirs. label adds a finalize line.
func TestTranslateTemplateForce(t *testing.T) {
	forced := step("RUN", "b")
	forced.Force = ptr(true)
	later := step("RUN", "c")
	later.Force = ptr(true)
	spec := e2bapi.TemplateBuildStartV2{Steps: &[]e2bapi.TemplateStep{step("RUN", "a"), forced, later}}
	tr, err := translateTemplate(spec, templateFrom{image: "debian"}, "t", "b-9")
	if err != nil {
		t.Fatal(err)
	}
	force := `LABEL dev.dsec.e2b.force="b-9"`
	if !strings.Contains(tr.dockerfile, `"a"]`+"\n"+force+"\nRUN [\"/bin/sh\",\"-c\",\"b\"]") || strings.Count(tr.dockerfile, force) != 1 {
		t.Errorf("step force: Dockerfile\n%s", tr.dockerfile)
	}
	if tr.steps[3] != "2" {
		t.Errorf("the force label is step %q, want 2", tr.steps[3])
	}
	spec = e2bapi.TemplateBuildStartV2{Force: ptr(true), Steps: &[]e2bapi.TemplateStep{step("RUN", "a")}}
	if tr, err = translateTemplate(spec, templateFrom{image: "debian"}, "t", "b-9"); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tr.dockerfile, "FROM debian\n"+force+"\n") {
		t.Errorf("build force: Dockerfile\n%s", tr.dockerfile)
	}
	n := strings.Count(tr.dockerfile, "\n")
	tr.label(tplLabelCPU, "2")
	if !strings.HasSuffix(tr.dockerfile, "\nLABEL dev.dsec.e2b.cpu-count=\"2\"\n") || tr.steps[n+1] != "finalize" {
		t.Errorf("label: Dockerfile\n%s steps %v", tr.dockerfile, tr.steps)
	}
}

package procio

import (
	"bytes"
	"os"
	"testing"

	"github.com/dsec-dev/dsec/internal/backend/driver"
)

// BenchmarkPipes is one short command's stdio as the container driver sets it
// up per exec: stdin from an open /dev/null, stdout and stderr each a pipe to a
// buffer, a line on stdout, then the exit and Drain.
func BenchmarkPipes(b *testing.B) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		b.Fatal(err)
	}
	defer devnull.Close()
	line := []byte("hello\n")
	b.ReportAllocs()
	for b.Loop() {
		var stdout, stderr bytes.Buffer
		p, err := Open(driver.Stdio{Stdin: devnull, Stdout: &stdout, Stderr: &stderr})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Child[1].Write(line); err != nil {
			b.Fatal(err)
		}
		p.CloseChild()
		p.Start()
		p.Drain(DrainGrace)
		p.Close()
		if stdout.Len() != len(line) {
			b.Fatalf("stdout %q", stdout.String())
		}
	}
}

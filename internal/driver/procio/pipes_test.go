package procio

import (
	"bytes"
	"testing"

	"github.com/dsec-dev/dsec/internal/driver"
)

// funcWriter is a writer of an uncomparable type, like an HTTP front end's
// adapter of a callback.
type funcWriter func(p []byte) (int, error)

func (f funcWriter) Write(p []byte) (int, error) { return f(p) }

// Open takes any writers: two of an uncomparable type get a pipe each (== on
// them would panic), one comparable writer for both gets one pipe.
func TestOpenWriters(t *testing.T) {
	fw := funcWriter(func(p []byte) (int, error) { return len(p), nil })
	p, err := Open(driver.Stdio{Stdout: fw, Stderr: fw})
	if err != nil {
		t.Fatal(err)
	}
	if p.Child[1] == p.Child[2] {
		t.Error("uncomparable writers share a pipe")
	}
	p.Close()
	var b bytes.Buffer
	p, err = Open(driver.Stdio{Stdout: &b, Stderr: &b})
	if err != nil {
		t.Fatal(err)
	}
	if p.Child[1] != p.Child[2] {
		t.Error("one writer for both streams got two pipes")
	}
	p.Close()
}

// Command serve runs a test registry (registrytest, token auth) at a given
// address for test suites outside Go, such as the E2B acceptance suite
// (test/e2b): it pushes one image, a busybox tree plus /etc/private-marker,
// prints "ready REF" and serves until its standard input closes.
//
//	serve -listen 127.0.0.1:5000 -user alice -pass s3cret [-repo team/private:1] [-stall BYTES]
package main

import (
	"archive/tar"
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsec-dev/dsec/internal/image"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
)

// fatal is the testing.TB registrytest's builders report to: any failure
// ends the program.
type fatal struct{ testing.TB }

func (fatal) Helper()                      {}
func (fatal) Fatal(args ...any)            { log.Fatal(args...) }
func (fatal) Fatalf(f string, args ...any) { log.Fatalf(f, args...) }

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	user := flag.String("user", "", "the user the token endpoint takes (empty: anonymous registry)")
	pass := flag.String("pass", "", "that user's password")
	repo := flag.String("repo", "team/private:1", "REPO:TAG of the image pushed")
	stall := flag.Int("stall", 0, "serve this many bytes of each blob, then hang until the client goes away (0: serve whole blobs)")
	images := flag.String("images", "/var/lib/dsec/images", "the directory images whose busybox tree is the image's base layer")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("registrytest serve: ")

	bb, err := (&image.Store{Dir: *images}).Resolve("busybox")
	if err != nil || len(bb.Lower()) != 1 {
		log.Fatalf("the busybox image in %s: %v", *images, err)
	}
	tree, err := exec.Command("tar", "-C", bb.Lower()[0], "--numeric-owner", "-cf", "-", ".").Output()
	if err != nil {
		log.Fatalf("tar busybox: %v", err)
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	t := fatal{}
	reg := registrytest.StartOn(l, *user, *pass)
	defer reg.Close()
	img := registrytest.Image(t, v1.Config{Env: []string{"FROM_PRIVATE=1"}}, registrytest.LayerFromTar(t, tree),
		registrytest.Layer(t, registrytest.Entry{Name: "etc/", Type: tar.TypeDir},
			registrytest.Entry{Name: "etc/private-marker", Body: "private base\n"}))
	reg.Push(t, *repo, img)
	if *stall > 0 {
		reg.Stall(*stall)
	}
	fmt.Printf("ready %s/%s\n", reg.Host, *repo)
	_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
}

package clustere2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	daemon "github.com/dsec-dev/dsec/internal/app/node"
	"github.com/dsec-dev/dsec/internal/image/registry/registrytest"
	"github.com/dsec-dev/dsec/internal/localtar"
	"github.com/dsec-dev/dsec/internal/paths"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// pullCreates is how many creates of a never-seen image the cluster answers
// at once (issue 27: 300 over 3 nodes), pullInFlight how many are in flight
// (all of them).
const (
	pullCreates  = 300
	pullInFlight = pullCreates
)

// pullImage is an image pushed to the test registry: busybox's tree as the
// base layer and random layers on top, each file's SHA-256 known.
type pullImage struct {
	ref, digest string
	layers      []string          // OCI layer digests, base first
	files       map[string]string // path in the image → sha256 hex of its content
}

// pushPullImage pushes an image of busybox's tree and n random layers of
// size bytes as repo.
func pushPullImage(t *testing.T, reg *registrytest.Registry, repo string, n int, size int64) pullImage {
	t.Helper()
	images := os.Getenv("DSEC_IMAGES_DIR")
	if images == "" {
		images = daemon.DefaultImagesDir
	}
	var base bytes.Buffer
	if err := localtar.Write(filepath.Join(images, "busybox", "rootfs"), &base); err != nil {
		t.Fatalf("busybox image: %v (make setup)", err)
	}
	ls := []v1.Layer{registrytest.LayerFromTar(t, base.Bytes())}
	img := pullImage{ref: reg.Host + "/" + repo, files: map[string]string{}}
	for i := range n {
		body := make([]byte, size)
		_, _ = rand.Read(body)
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		name := fmt.Sprintf("data/layer%d.bin", i)
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg, ModTime: time.Unix(1700000000, 0)}); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write(body)
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(body)
		img.files["/"+name] = hex.EncodeToString(sum[:])
		ls = append(ls, registrytest.LayerFromTar(t, buf.Bytes()))
	}
	for _, l := range ls {
		dg, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		img.layers = append(img.layers, dg.String())
	}
	cfg := v1.Config{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}
	img.digest = reg.Push(t, repo, registrytest.Image(t, cfg, ls...))
	return img
}

// checkFiles fails t unless every random file of img reads back in sandbox
// id with its content.
func (e *env) checkFiles(ctx context.Context, t *testing.T, id string, img pullImage) {
	t.Helper()
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range img.files {
			if !yield(n) {
				return
			}
		}
	})
	r, err := e.client(0).Exec(ctx, id, api.ExecRequest{Cmd: append([]string{"sha256sum"}, names...), TimeoutMs: 60000})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("sha256sum in %s: %+v %v", id, r, err)
	}
	for _, n := range names {
		if !strings.Contains(r.Stdout, img.files[n]+"  "+n+"\n") {
			t.Errorf("%s in %s: sha256sum says\n%s\nwant %s", n, id, r.Stdout, img.files[n])
		}
	}
}

// pullCluster starts the cluster of the pull tests: 3 agents sharing one
// blob store (e.blobs()), each with room for capacity sandboxes and the
// credentials of reg, a registry with token auth on the hub address (the
// agents reach it from their namespaces), and one API server.
func pullCluster(t *testing.T, capacity int) (*env, *registrytest.Registry, map[string]string) {
	var reg *registrytest.Registry
	e := setupWith(t, capacity, 1, func(e *env) {
		pass := "pw-" + randHex(4)
		reg = registrytest.StartAt(t, net.JoinHostPort(e.hub, "0"), "puller", pass)
		auth := base64.StdEncoding.EncodeToString([]byte("puller:" + pass))
		cfg, _ := json.Marshal(map[string]any{"auths": map[string]any{reg.Host: map[string]string{"auth": auth}}})
		creds := filepath.Join(e.dir, "registry-config.json")
		if err := os.WriteFile(creds, cfg, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(e.blobs(), 0o755); err != nil {
			t.Fatal(err)
		}
		e.agentArgs = []string{"--blob-store", "dir:" + e.blobs(), "--insecure-registry", reg.Host, "--registry-config", creds}
	})
	// Each agent reaches the registry from its namespace's address.
	byIP := map[string]string{}
	for _, a := range e.agents {
		ip, _, _ := net.SplitHostPort(a.addr)
		byIP[ip] = a.node
	}
	return e, reg, byIP
}

// fetches counts reg's GETs since from by node (byIP) and what they fetched.
type fetches struct {
	manifests map[string]int            // node → manifest GETs
	byDigest  map[string]map[string]int // manifest digest → node → GETs by that digest
	blobs     map[string]map[string]int // digest → node → GETs
}

func countFetches(gets []registrytest.Get, byIP map[string]string) fetches {
	f := fetches{manifests: map[string]int{}, byDigest: map[string]map[string]int{}, blobs: map[string]map[string]int{}}
	for _, g := range gets {
		node := nodeOf(g, byIP)
		m := f.blobs
		if g.Manifest {
			f.manifests[node]++
			if !strings.HasPrefix(g.Name, "sha256:") {
				continue // by tag
			}
			m = f.byDigest
		}
		if m[g.Name] == nil {
			m[g.Name] = map[string]int{}
		}
		m[g.Name][node]++
	}
	return f
}

// nodeOf is the node that sent g (its client address if no node has it).
func nodeOf(g registrytest.Get, byIP map[string]string) string {
	if node := byIP[g.Client]; node != "" {
		return node
	}
	return g.Client
}

// countHeads counts manifest HEADs by node.
func countHeads(heads []registrytest.Get, byIP map[string]string) map[string]int {
	out := map[string]int{}
	for _, h := range heads {
		out[nodeOf(h, byIP)]++
	}
	return out
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestPull300 is issue 27's cluster test with real processes: etcd, three
// agents (container sandboxes) sharing one blob store and one API server;
// 300 concurrent creates of an image none of them has seen, from a registry
// with token auth, all run; each layer, the config and the manifest are
// fetched from the registry exactly once for the whole cluster (a node
// resolves the tag with a HEAD and reads the manifest by digest from the
// shared blob store); every node's sandboxes read the image's files
// intact; deleting them all leaves no sandbox, mount or cgroup behind.
func TestPull300(t *testing.T) {
	e, reg, byIP := pullCluster(t, pullCreates/2)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	img := pushPullImage(t, reg, "rl/task:v1", 3, 4<<20)
	cfgDigest := ""
	for dg := range reg.BlobGets() { // (the push read nothing back)
		t.Fatalf("the registry served blob %s before any create", dg)
	}

	cl := e.client(0)
	start := time.Now()
	sbs := make([]api.Sandbox, pullCreates)
	errs := make([]error, pullCreates)
	lat := make([]time.Duration, pullCreates)
	sem := make(chan struct{}, pullInFlight)
	var wg sync.WaitGroup
	for i := range pullCreates {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			t0 := time.Now()
			sbs[i], errs[i] = cl.Create(ctx, api.CreateSandboxRequest{Image: img.ref})
			lat[i] = time.Since(t0)
		})
	}
	wg.Wait()
	wall := time.Since(start)
	byNode := map[string][]string{}
	failed := 0
	for i, sb := range sbs {
		if errs[i] != nil {
			if failed++; failed <= 5 {
				t.Errorf("create %d: %v", i, errs[i])
			}
			continue
		}
		if sb.State != api.StateRunning || sb.ImageDigest != img.digest || sb.Backend != "container" {
			t.Errorf("create %d: %+v, want a running container with image digest %s", i, sb, img.digest)
		}
		node, _ := session.NodeOf(sb.ID)
		byNode[node] = append(byNode[node], sb.ID)
	}
	slices.Sort(lat)
	t.Logf("%d creates of a never-seen image (%d in flight, 3 nodes): wall %s, %.1f creates/s, latency p50 %s p99 %s max %s; per node %d/%d/%d",
		pullCreates, pullInFlight, wall.Round(time.Millisecond), float64(pullCreates)/wall.Seconds(),
		lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*99/100].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond),
		len(byNode["n1"]), len(byNode["n2"]), len(byNode["n3"]))
	if failed > 0 {
		t.Fatalf("%d of %d creates failed", failed, pullCreates)
	}
	for _, a := range e.agents {
		if len(byNode[a.node]) == 0 {
			t.Errorf("no create went to %s: %d/%d/%d", a.node, len(byNode["n1"]), len(byNode["n2"]), len(byNode["n3"]))
		}
	}

	f := countFetches(reg.Gets(), byIP)
	for i, dg := range img.layers {
		if n := total(f.blobs[dg]); n != 1 {
			t.Errorf("layer %d (%s) fetched %d times from the registry (%v), want once for the cluster", i, dg, n, f.blobs[dg])
		}
	}
	for dg, by := range f.blobs {
		if !slices.Contains(img.layers, dg) {
			cfgDigest = dg
			t.Logf("config %s fetched %d times: %v", dg, total(by), by)
			if total(by) != 1 {
				t.Errorf("config %s fetched %d times from the registry (%v), want once for the cluster", dg, total(by), by)
			}
		}
	}
	if cfgDigest == "" {
		t.Errorf("the config blob was never fetched: %v", f.blobs)
	}
	// The manifest body: fetched by digest once for the cluster.
	if by := f.byDigest[img.digest]; total(by) != 1 {
		t.Errorf("manifest %s fetched by digest %d times from the registry (%v), want once for the cluster", img.digest, total(by), by)
	}
	for dg, by := range f.byDigest {
		if dg != img.digest {
			t.Errorf("manifest GETs of %s (%v): the image has no such manifest", dg, by)
		}
	}
	if n, byTag := total(f.manifests), total(f.byDigest[img.digest]); n != byTag {
		t.Errorf("%d manifest GETs by tag (by node %v), want none: a HEAD resolves the tag", n-byTag, f.manifests)
	}
	// A tag is resolved at every create (the sandbox records what it named
	// then): by the flight of creates of it waiting on a node at once.
	t.Logf("manifest HEADs by node: %v, manifest GETs by node: %v (%d creates)", countHeads(reg.Heads(), byIP), f.manifests, pullCreates)

	// A few sandboxes of every node read every layer's file intact.
	for _, a := range e.agents {
		ids := byNode[a.node]
		for _, id := range []string{ids[0], ids[len(ids)-1]} {
			e.checkFiles(ctx, t, id, img)
		}
	}

	// (What checkNothingLeft looks for is there while a sandbox runs.)
	mounts, cgroups := leftovers(t, sbs[0].ID)
	if len(cgroups) == 0 {
		t.Errorf("running sandbox %s: no cgroup names it", sbs[0].ID)
	}
	t.Logf("running sandbox %s: %d cgroups and %d mounts of the host's mount namespace name it", sbs[0].ID, len(cgroups), len(mounts))

	start = time.Now()
	sem = make(chan struct{}, pullInFlight)
	var delErrs []error
	var mu sync.Mutex
	for _, sb := range sbs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := cl.Delete(ctx, sb.ID); err != nil {
				mu.Lock()
				delErrs = append(delErrs, fmt.Errorf("delete %s: %w", sb.ID, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("%d deletes: %s", pullCreates, time.Since(start).Round(time.Millisecond))
	if len(delErrs) > 0 {
		t.Fatalf("%d deletes failed, first: %v", len(delErrs), delErrs[0])
	}
	e.checkNothingLeft(ctx, t, sbs)
}

// checkNothingLeft fails t if the API server lists a sandbox, or any of sbs
// left a directory, a mount or a cgroup on its node.
func (e *env) checkNothingLeft(ctx context.Context, t *testing.T, sbs []api.Sandbox) {
	t.Helper()
	if list, err := e.client(0).List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("after deleting every sandbox the API server lists %d: %v", len(list), err)
	}
	for _, a := range e.agents {
		if ents, err := os.ReadDir(paths.New(a.dataDir).Sandboxes()); err == nil && len(ents) > 0 {
			t.Errorf("%s: %d sandbox directories left, e.g. %s", a.node, len(ents), ents[0].Name())
		}
	}
	// A deleted sandbox's teardown ends in the background after Delete
	// answered.
	testwait.Until(30*time.Second, func() bool {
		for _, sb := range sbs {
			if mounts, cgroups := leftovers(t, sb.ID); len(mounts)+len(cgroups) > 0 {
				return false
			}
		}
		return true
	})
	for _, sb := range sbs {
		if mounts, cgroups := leftovers(t, sb.ID); len(mounts)+len(cgroups) > 0 {
			t.Errorf("sandbox %s: mounts %q and cgroups %q left", sb.ID, mounts, cgroups)
		}
	}
}

// leftovers are the mounts of this process's mount namespace and the
// cgroups that name sandbox id. (A container's root is mounted in its own
// mount namespace: no host mount names a running one today; one that did
// and outlived its sandbox would show here.)
func leftovers(t *testing.T, id string) (mounts, cgroups []string) {
	t.Helper()
	// sb-HEX.NODE: the hex part names its cgroup and its mounts.
	local, _, _ := strings.Cut(strings.TrimPrefix(id, "sb-"), ".")
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(info), "\n") {
		if strings.Contains(l, local) {
			mounts = append(mounts, l)
		}
	}
	_ = filepath.WalkDir("/sys/fs/cgroup", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.Contains(d.Name(), local) {
			cgroups = append(cgroups, path)
		}
		if strings.Count(path, "/") > 8 {
			return fs.SkipDir
		}
		return nil
	})
	return mounts, cgroups
}

// TestPullKill9MidFetch: a node agent killed (-9) while it fetches a layer
// of a never-seen image for a create; creates of the image through the API
// server then run on the other nodes and on the restarted node, every layer
// intact, and the layers were fetched again at most once after the kill.
func TestPullKill9MidFetch(t *testing.T) {
	e, reg, byIP := pullCluster(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	img := pushPullImage(t, reg, "rl/crash:v1", 2, 4<<20)
	victim := e.agents[0]
	// Each blob stops after its first 256 KiB until Resume.
	reg.Stall(256 << 10)
	first := make(chan error, 1)
	go func() {
		_, err := e.client(0).Create(ctx, api.CreateSandboxRequest{Image: img.ref, Node: victim.node})
		first <- err
	}()
	tmp := filepath.Join(paths.New(victim.dataDir).Pulls(), "tmp")
	// Mid-fetch: the registry sent the victim the start of a layer (the rest
	// stalls), and the EROFS layer it converts into as the body arrives
	// exists, partial.
	e.waitFor(victim.node+" mid-fetch of a layer", time.Minute, func() error {
		f := countFetches(reg.Gets(), byIP)
		asked := false
		for _, dg := range img.layers {
			asked = asked || f.blobs[dg][victim.node] > 0
		}
		if !asked {
			return fmt.Errorf("%s has asked the registry for no layer yet", victim.node)
		}
		if m, _ := filepath.Glob(filepath.Join(tmp, "dsec-layer-*.erofs")); len(m) == 0 {
			return fmt.Errorf("no partial layer in %s yet", tmp)
		}
		return nil
	})
	victim.stop(syscall.SIGKILL)
	// Its node died: the infrastructure's failure, not a lack of room.
	err := <-first
	if ae, ok := api.AsError(err); !ok || ae.Code != api.CodeUnavailable || !ae.Infrastructure || !ae.Retryable {
		t.Errorf("the create pinned to the killed node: %v, want unavailable (infrastructure, retryable)", err)
	}
	t.Logf("the create on the killed node: %v", err)
	reg.Resume()

	// The others claim the layers the dead node held once its claims' lease
	// (the agents' --ttl) ends, and run the creates.
	var ids []string
	for _, a := range e.agents[1:] {
		t0 := time.Now()
		sb, err := e.client(0).Create(ctx, api.CreateSandboxRequest{Image: img.ref, Node: a.node})
		if err != nil {
			t.Fatalf("create on %s after the kill: %v", a.node, err)
		}
		took := time.Since(t0)
		t.Logf("create on %s after the kill: %s (lease TTL %s)", a.node, took.Round(time.Millisecond), ttl)
		if took > ttl+3*time.Second {
			t.Errorf("create on %s after the kill took %s: the dead node's claims outlived its lease (%s)", a.node, took, ttl)
		}
		if sb.ImageDigest != img.digest {
			t.Errorf("sandbox %+v, want image digest %s", sb, img.digest)
		}
		e.checkFiles(ctx, t, sb.ID, img)
		ids = append(ids, sb.ID)
	}
	e.startAgent(victim, e.secret)
	var sb api.Sandbox
	e.waitFor("a create on the restarted "+victim.node, 30*time.Second, func() error {
		var err error
		sb, err = e.client(0).Create(ctx, api.CreateSandboxRequest{Image: img.ref, Node: victim.node})
		return err
	})
	e.checkFiles(ctx, t, sb.ID, img)
	ids = append(ids, sb.ID)
	if ents, _ := os.ReadDir(tmp); len(ents) > 0 {
		t.Errorf("the restarted node kept %d partial fetches in %s", len(ents), tmp)
	}
	f := countFetches(reg.Gets(), byIP)
	for i, dg := range img.layers {
		// At most the killed node's and one more.
		if n := total(f.blobs[dg]) - f.blobs[dg][victim.node]; n > 1 {
			t.Errorf("layer %d fetched %d times by the other nodes (%v), want at most once", i, n, f.blobs[dg])
		}
	}
	t.Logf("fetches: manifests %v, blobs %v", f.manifests, f.blobs)
	var sbs []api.Sandbox
	for _, id := range ids {
		if err := e.client(0).Delete(ctx, id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
		sbs = append(sbs, api.Sandbox{ID: id})
	}
	e.checkNothingLeft(ctx, t, sbs)
}

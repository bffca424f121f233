package paths

import "testing"

func TestLayout(t *testing.T) {
	p := New("/d")
	for got, want := range map[string]string{
		p.Token(): "/d/token", p.Sandboxes(): "/d/sandboxes", p.Logs("sb-1"): "/d/logs/sb-1",
		p.Blobs(): "/d/blobs", p.Layers(): "/d/layers", p.EnvStore(): "/d/envstore",
		p.Trajectories(): "/d/trajectories", p.TrajectoriesBolt(): "/d/trajectories.db",
		p.BlobSpec(""): "dir:/d/blobs", p.BlobSpec("s3://b"): "s3://b", p.Images(): "/d/images",
	} {
		if got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
	if New("").Root != DefaultRoot {
		t.Fatal("default root")
	}
}

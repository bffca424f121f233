package image

import (
	"maps"
	"slices"
	"testing"
)

func TestMerge(t *testing.T) {
	base := &Config{Env: []string{"PATH=/usr/bin:/bin", "LANG=C", "A=1"}, WorkingDir: "/base", User: "root",
		Entrypoint: []string{"/init"}, Cmd: []string{"run"}}
	// Env merges by key, upper wins, order kept; unset scalars inherit.
	got := Merge(base, &Config{Env: []string{"PATH=/opt/tool/bin:/usr/bin:/bin", "JAVA_HOME=/opt/jdk"}, User: "1000"})
	if !slices.Equal(got.Env, []string{"PATH=/opt/tool/bin:/usr/bin:/bin", "LANG=C", "A=1", "JAVA_HOME=/opt/jdk"}) ||
		got.WorkingDir != "/base" || got.User != "1000" || !slices.Equal(got.Entrypoint, []string{"/init"}) || !slices.Equal(got.Cmd, []string{"run"}) {
		t.Fatalf("merge: %+v", got)
	}
	// An upper Entrypoint resets the inherited Cmd; an upper Cmd alone keeps the Entrypoint.
	if got := Merge(base, &Config{Entrypoint: []string{"/other"}}); !slices.Equal(got.Entrypoint, []string{"/other"}) || len(got.Cmd) != 0 {
		t.Fatalf("entrypoint: %+v", got)
	}
	if got := Merge(base, &Config{Cmd: []string{"x"}}); !slices.Equal(got.Entrypoint, []string{"/init"}) || !slices.Equal(got.Cmd, []string{"x"}) {
		t.Fatalf("cmd: %+v", got)
	}
	if Merge(nil, nil) != nil || Merge(nil, &Config{}) != nil {
		t.Fatal("no config must merge to nil")
	}
	if got := Merge(nil, base); got == base || !slices.Equal(got.Env, base.Env) {
		t.Fatal("merge must copy")
	}
	got = Merge(base, nil)
	got.Env[0] = "changed"
	if base.Env[0] == "changed" {
		t.Fatal("merge result shares the input's env")
	}
	// A manifest: layers' configs base first, then the manifest's own.
	m := Manifest{Layers: []Layer{{Config: &Config{Env: []string{"A=base"}, User: "1"}}, {}, {Config: &Config{Env: []string{"A=tk", "B=tk"}}}},
		Config: &Config{Env: []string{"B=manifest"}, WorkingDir: "/w"}}
	if c := m.ImageConfig(); !slices.Equal(c.Env, []string{"A=tk", "B=manifest"}) || c.User != "1" || c.WorkingDir != "/w" {
		t.Fatalf("manifest config: %+v", c)
	}
}

// TestExecDefaults: the image gives the base env, cwd and user of an exec;
// the request overrides each; no config changes nothing.
func TestExecDefaults(t *testing.T) {
	c := &Config{Env: []string{"PATH=/opt/tool/bin:/bin", "JAVA_HOME=/opt/jdk", "EMPTY="}, WorkingDir: "/work", User: "1000"}
	env := map[string]string{"PATH": "/usr/bin", "HOME": "/root"}
	c.ExecEnv(env)
	if want := map[string]string{"PATH": "/opt/tool/bin:/bin", "HOME": "/root", "JAVA_HOME": "/opt/jdk", "EMPTY": ""}; !maps.Equal(env, want) {
		t.Fatalf("env %v, want %v", env, want)
	}
	if c.ExecUser("") != "1000" || c.ExecUser("root") != "root" {
		t.Fatal("user")
	}
	if c.ExecCwd("", "/home/u") != "/work" || c.ExecCwd("/tmp", "/home/u") != "/tmp" {
		t.Fatal("cwd")
	}
	var none *Config
	env = map[string]string{"PATH": "/usr/bin"}
	none.ExecEnv(env)
	if env["PATH"] != "/usr/bin" || len(env) != 1 || none.ExecUser("") != "" || none.ExecCwd("", "/root") != "/root" {
		t.Fatal("nil config must leave the defaults")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{Env: []string{"A"}}, {Env: []string{"=x"}}, {Env: []string{"A=\x00"}}, {WorkingDir: "rel"}, {User: "a b"}, {Cmd: []string{"\x00"}}} {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := (&Config{Env: []string{"A=", "B=c=d"}, WorkingDir: "/", User: "1000:1000"}).Validate(); err != nil {
		t.Fatal(err)
	}
}

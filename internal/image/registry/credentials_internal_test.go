package registry

import (
	"context"
	"testing"
)

// A call's credentials for docker.io go to Docker Hub itself, never to a
// mirror hosts.toml puts before it.
func TestCallCredentialsSkipMirrors(t *testing.T) {
	c, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := Parse("python:3.12")
	if err != nil {
		t.Fatal(err)
	}
	ctx := WithCredentials(context.Background(), "docker.io", Credentials{Username: "u", Password: "p"})
	if _, ok := c.authFor(ctx, ref, endpoint{host: "mirror.local:5000"}).(staticKeychain); ok {
		t.Error("a mirror gets the call's Docker Hub credentials")
	}
	if _, ok := c.authFor(ctx, ref, endpoint{host: "registry-1.docker.io"}).(staticKeychain); !ok {
		t.Error("Docker Hub does not get the call's docker.io credentials")
	}
	if _, ok := c.authFor(context.Background(), ref, endpoint{host: "registry-1.docker.io"}).(staticKeychain); ok {
		t.Error("a call without credentials gets some")
	}
}

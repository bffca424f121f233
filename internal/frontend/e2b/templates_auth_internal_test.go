package e2b

import (
	"cmp"
	"fmt"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/e2bapi"
	"github.com/dsec-dev/dsec/pkg/api"
)

// registrySpec is a fromImage(base, credentials) build as the SDK sends it.
func registrySpec(t *testing.T, base string, set func(*e2bapi.FromImageRegistry) error) e2bapi.TemplateBuildStartV2 {
	t.Helper()
	var r e2bapi.FromImageRegistry
	if err := set(&r); err != nil {
		t.Fatal(err)
	}
	return e2bapi.TemplateBuildStartV2{FromImage: &base, FromImageRegistry: &r}
}

// The credentials a template gives go to the build request for the base
// image's registry host, and into no line of the Dockerfile the build runs.
func TestTemplateRegistryAuth(t *testing.T) {
	for name, c := range map[string]struct {
		spec       e2bapi.TemplateBuildStartV2
		host       string
		user, pass string
	}{
		"fromImage": {registrySpec(t, "registry.example:5000/team/app:1", func(r *e2bapi.FromImageRegistry) error {
			return r.FromGeneralRegistry(e2bapi.GeneralRegistry{Type: e2bapi.Registry, Username: "alice", Password: "s3cret-pw"})
		}), "registry.example:5000", "alice", "s3cret-pw"},
		"docker hub short name": {registrySpec(t, "team/app", func(r *e2bapi.FromImageRegistry) error {
			return r.FromGeneralRegistry(e2bapi.GeneralRegistry{Type: e2bapi.Registry, Username: "bob", Password: "hub-pw"})
		}), "index.docker.io", "bob", "hub-pw"},
		"fromGCPRegistry": {registrySpec(t, "europe-docker.pkg.dev/p/r/img:2", func(r *e2bapi.FromImageRegistry) error {
			return r.FromGCPRegistry(e2bapi.GCPRegistry{Type: e2bapi.Gcp, ServiceAccountJson: `{"type":"service_account","private_key":"KEY"}`})
		}), "europe-docker.pkg.dev", "_json_key", `{"type":"service_account","private_key":"KEY"}`},
	} {
		base, err := templateBase(c.spec)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		tr, err := translateTemplate(c.spec, templateFrom{image: base, named: base}, "t", "b")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := map[string]api.RegistryAuth{c.host: {Username: c.user, Password: c.pass}}
		if fmt.Sprint(len(tr.auth)) != "1" || tr.auth[c.host] != want[c.host] {
			t.Errorf("%s: auth %d entries (%v), want %s for %s", name, len(tr.auth), tr.auth, c.user, c.host)
		}
		if strings.Contains(tr.dockerfile, c.pass) {
			t.Errorf("%s: the Dockerfile holds the password:\n%s", name, tr.dockerfile)
		}
		if s := fmt.Sprintf("%v %+v %#v", tr.auth, api.BuildImageRequest{RegistryAuth: tr.auth}, tr.auth[c.host]); strings.Contains(s, c.pass) {
			t.Errorf("%s: printing the request shows the password: %s", name, s)
		}
	}
}

// Credentials that cannot be used are refused before the build starts: AWS
// ECR (a token exchange dsec does not make) as not_implemented naming it,
// the rest as invalid_argument.
func TestTemplateRegistryAuthRefused(t *testing.T) {
	for name, c := range map[string]struct {
		spec e2bapi.TemplateBuildStartV2
		code api.Code
		want string
	}{
		"aws": {registrySpec(t, "123.dkr.ecr.us-east-1.amazonaws.com/app:1", func(r *e2bapi.FromImageRegistry) error {
			return r.FromAWSRegistry(e2bapi.AWSRegistry{Type: e2bapi.Aws, AwsAccessKeyId: "AKIA", AwsSecretAccessKey: "secret", AwsRegion: "us-east-1"})
		}), api.CodeNotImplemented, "AWS ECR"},
		"no password": {registrySpec(t, "r.example/app", func(r *e2bapi.FromImageRegistry) error {
			return r.FromGeneralRegistry(e2bapi.GeneralRegistry{Type: e2bapi.Registry, Username: "alice"})
		}), api.CodeInvalidArgument, "username and a password"},
		"gcp key not json": {registrySpec(t, "gcr.io/p/app", func(r *e2bapi.FromImageRegistry) error {
			return r.FromGCPRegistry(e2bapi.GCPRegistry{Type: e2bapi.Gcp, ServiceAccountJson: "not json"})
		}), api.CodeInvalidArgument, "not JSON"},
		"default base": {registrySpec(t, e2bBaseImage, func(r *e2bapi.FromImageRegistry) error {
			return r.FromGeneralRegistry(e2bapi.GeneralRegistry{Type: e2bapi.Registry, Username: "a", Password: "b"})
		}), api.CodeInvalidArgument, "registry reference"},
	} {
		base, err := templateBase(c.spec)
		if err == nil {
			_, err = translateTemplate(c.spec, templateFrom{image: cmp.Or(base, "debian"), named: base}, "t", "b")
		}
		if err == nil || !errdefs.Is(err, c.code) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %s with %q", name, err, c.code, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error shows the secret: %v", name, err)
		}
	}
}

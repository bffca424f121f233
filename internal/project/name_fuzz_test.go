package project_test

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/project"
	"github.com/dsec-dev/dsec/pkg/api"
)

// FuzzCreateProject: a POST /v1/projects body, as the admin API receives it,
// either makes a project whose name is a valid key segment or is refused with
// invalid_argument, and the store is unchanged by a refusal.
func FuzzCreateProject(f *testing.F) {
	for _, s := range []string{`{"name":"team-a","quota":{"max_sandboxes":3,"cpu":2.5}}`, `{"name":"../x"}`,
		`{"name":"a","quota":{"cpu":-1}}`, `{"name":"` + "\u00e9" + `"}`, `{"name":""}`} {
		f.Add(s)
	}
	valid := regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	f.Fuzz(func(t *testing.T, body string) {
		var req api.CreateProjectRequest
		if json.Unmarshal([]byte(body), &req) != nil {
			return
		}
		l, err := project.OpenLocal("", "admin-token-0123456789")
		if err != nil {
			t.Fatal(err)
		}
		tok, err := l.Create(t.Context(), req.Name, project.QuotaFromAPI(req.Quota))
		list, _ := l.List(t.Context())
		if err != nil {
			if !errdefs.Is(err, api.CodeInvalidArgument) && !errdefs.Is(err, api.CodeAlreadyExists) {
				t.Fatalf("%q: %v", body, err)
			}
			if len(list) != 1 {
				t.Fatalf("a refused create left %d projects", len(list))
			}
			return
		}
		if !valid.MatchString(req.Name) {
			t.Fatalf("accepted the name %q", req.Name)
		}
		if p, ok := l.Identify(tok); !ok || p != req.Name {
			t.Fatalf("the new token is %q %v", p, ok)
		}
	})
}

package v1

import (
	"bufio"
	"bytes"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/frontend/v1/openapitest"
	"github.com/dsec-dev/dsec/pkg/api"
)

// openAPIPaths parses the document's "paths:" section minimally: path keys are
// indented two spaces, their operations four.
func openAPIPaths(doc []byte) map[string]map[string]bool {
	paths := map[string]map[string]bool{}
	var cur string
	in := false
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "paths:":
			in = true
		case !in || strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#"):
		case !strings.HasPrefix(line, " "):
			in = false
		case strings.HasPrefix(line, "  /") && strings.HasSuffix(line, ":"):
			cur = strings.TrimSuffix(strings.TrimSpace(line), ":")
			paths[cur] = map[string]bool{}
		case cur != "" && strings.HasPrefix(line, "    ") && !strings.HasPrefix(line, "     "):
			key, _, _ := strings.Cut(strings.TrimSpace(line), ":")
			paths[cur][key] = true
		}
	}
	return paths
}

func TestOpenAPICoversRoutes(t *testing.T) {
	paths := openAPIPaths(api.OpenAPI())
	if len(paths) == 0 {
		t.Fatal("no paths parsed")
	}
	s := New(nil, Options{})
	documented := map[string]bool{}
	for _, rt := range s.routes() {
		method, path, ok := strings.Cut(rt.pattern, " ")
		methods := []string{method}
		if !ok {
			path = method
			methods = []string{"get", "head", "post", "put", "patch", "delete", "options"}
		}
		path = strings.ReplaceAll(path, "...}", "}") // OpenAPI has no multi-segment parameters
		ops, ok := paths[path]
		if !ok {
			t.Errorf("route %q: path %s missing from openapi.yaml", rt.pattern, path)
			continue
		}
		for _, m := range methods {
			if !ops[strings.ToLower(m)] {
				t.Errorf("route %q: operation %s missing under %s", rt.pattern, strings.ToLower(m), path)
			}
		}
		documented[path] = true
	}
	for p := range paths {
		if !documented[p] {
			t.Errorf("openapi.yaml documents %s, which no route serves", p)
		}
	}
}

// openAPIProperties parses the property names of each schema under
// components/schemas: schema keys are indented four spaces, "properties:" six and
// property names eight.
func openAPIProperties(doc []byte) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	var cur string
	inSchemas, inProps := false, false
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "  schemas:":
			inSchemas = true
		case !inSchemas || strings.TrimSpace(line) == "":
		case !strings.HasPrefix(line, "    "):
			inSchemas = false
		case !strings.HasPrefix(line, "     "):
			cur, inProps = strings.TrimSuffix(strings.TrimSpace(line), ":"), false
			out[cur] = map[string]bool{}
		case strings.HasPrefix(line, "      ") && !strings.HasPrefix(line, "       "):
			inProps = strings.TrimSpace(line) == "properties:"
		case inProps && strings.HasPrefix(line, "        ") && !strings.HasPrefix(line, "         "):
			key, _, _ := strings.Cut(strings.TrimSpace(line), ":")
			out[cur][key] = true
		}
	}
	return out
}

// The schemas of the exec and stream types list exactly the Go types' JSON fields.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	props := openAPIProperties(api.OpenAPI())
	for name, v := range map[string]any{
		"ExecRequest": api.ExecRequest{}, "ExecResult": api.ExecResult{}, "TermSize": api.TermSize{},
		"StreamInput": api.StreamInput{}, "StreamEvent": api.StreamEvent{}, "Info": api.Info{},
		"Quota": api.Quota{}, "Usage": api.Usage{}, "Project": api.Project{}, "ProjectToken": api.ProjectToken{},
		"CreateProjectRequest": api.CreateProjectRequest{}, "ProjectTokenResponse": api.ProjectTokenResponse{},
		"RegistryAuth":    api.RegistryAuth{},
		"DeadlineRequest": api.DeadlineRequest{}, "ProcessInput": api.ProcessInput{}, "Process": api.Process{},
		"ProcessOutput": api.ProcessOutput{},
		"HostFeature":   api.HostFeature{},
	} {
		have, ok := props[name]
		if !ok {
			t.Errorf("schema %s missing", name)
			continue
		}
		rt := reflect.TypeOf(v)
		want := map[string]bool{}
		for i := range rt.NumField() {
			tag, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if tag != "" && tag != "-" {
				want[tag] = true
			}
		}
		if !reflect.DeepEqual(have, want) {
			t.Errorf("schema %s has properties %v, the Go type %v", name, keys(have), keys(want))
		}
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The document is valid OpenAPI 3.0 (kin-openapi's validation): every test
// server checks its traffic against it (openapitest).
func TestOpenAPIDocumentValid(t *testing.T) {
	if _, err := openapitest.New(api.OpenAPI()); err != nil {
		t.Fatal(err)
	}
}

package e2b_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/cluster/etcdtest"
	"github.com/dsec-dev/dsec/internal/frontend/e2b/buildstate"
	"github.com/dsec-dev/dsec/internal/testwait"
)

// buildStatus is one status answer.
type buildStatus struct {
	Status     string
	LogEntries []struct{ Level, Message string }
	Reason     *struct{ Message string }
}

func (e *tplEnv) poll(id, build string, offset int) buildStatus {
	e.t.Helper()
	res, b := e.call("GET", fmt.Sprintf("/templates/%s/builds/%s/status?logsOffset=%d", id, build, offset), nil)
	if res.StatusCode != http.StatusOK {
		e.t.Fatalf("status through %s: %d %s", e.srv.URL, res.StatusCode, b)
	}
	var st buildStatus
	if err := json.Unmarshal(b, &st); err != nil {
		e.t.Fatal(err)
	}
	return st
}

// TestTemplateBuildAcrossFrontEnds: two front ends over one node keep their
// template builds in one cluster store (etcd), as a cluster's API servers
// do: a build requested and started through A is uploaded to, polled and
// logged through B (offsets as the SDK advances them: every entry once) until
// ready; a build whose front end's lease is gone (its process died) ends as
// an error through B, naming that front end.
func TestTemplateBuildAcrossFrontEnds(t *testing.T) {
	cli := etcdtest.Start(t)
	first := newTplEnv(t)
	storeA := buildstate.NewEtcd(buildstate.EtcdConfig{Client: cli, Runner: "api-a", RunnerTTL: 2 * time.Second})
	a := first.fake.frontEnd(t, storeA)
	b := first.fake.frontEnd(t, buildstate.NewEtcd(buildstate.EtcdConfig{Client: cli, Runner: "api-b", RunnerTTL: 2 * time.Second}))

	id, build := a.requestBuild("shared-tpl")
	// The upload link comes from B and is PUT to B.
	res, body := b.call("GET", "/templates/"+id+"/files/hash1", nil)
	var link struct {
		Present bool
		URL     string `json:"url"`
	}
	_ = json.Unmarshal(body, &link)
	if res.StatusCode != http.StatusCreated || link.Present || !strings.HasPrefix(link.URL, b.srv.URL+"/") {
		t.Fatalf("upload link through B: %d %s", res.StatusCode, body)
	}
	req, _ := http.NewRequest("PUT", link.URL, bytes.NewReader(gzTar(t, map[string]string{"hello.txt": "shared hi\n"})))
	put, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	put.Body.Close()
	if put.StatusCode != http.StatusOK {
		t.Fatalf("PUT through B: %d", put.StatusCode)
	}
	if _, body := a.call("GET", "/templates/"+id+"/files/hash1", nil); !strings.Contains(string(body), `"present":true`) {
		t.Errorf("the upload through B, asked through A: %s", body)
	}

	spec := map[string]any{"fromTemplate": "base", "steps": []map[string]any{
		{"type": "RUN", "args": []string{"echo block-until-released"}},
		{"type": "COPY", "args": []string{"hello.txt", "/app/", "", ""}, "filesHash": "hash1"},
	}}
	if res, body := a.call("POST", "/v2/templates/"+id+"/builds/"+build, spec); res.StatusCode != http.StatusAccepted {
		t.Fatalf("start through A: %d %s", res.StatusCode, body)
	}
	if res, _ := b.call("POST", "/v2/templates/"+id+"/builds/"+build, spec); res.StatusCode != http.StatusConflict {
		t.Errorf("a second start through B: %d, want 409", res.StatusCode)
	}
	// Poll through B as the SDK does, the offset advanced by what came.
	var seen []string
	offset := 0
	pollB := func() buildStatus {
		st := b.poll(id, build, offset)
		offset += len(st.LogEntries)
		for _, e := range st.LogEntries {
			seen = append(seen, e.Message)
		}
		return st
	}
	testwait.For(t, 10*time.Second, "the running build's output through B", func() bool {
		st := pollB()
		if st.Status != "building" {
			t.Fatalf("status %s before the build was released; logs %q", st.Status, seen)
		}
		return strings.Contains(strings.Join(seen, "\n"), "blocked-build")
	})
	first.fake.release <- struct{}{}
	var st buildStatus
	testwait.For(t, 10*time.Second, "the build ready through B", func() bool {
		st = pollB()
		return st.Status != "building"
	})
	if st.Status != "ready" {
		t.Fatalf("status %s %+v; logs %q", st.Status, st.Reason, seen)
	}
	count := map[string]int{}
	for _, m := range seen {
		count[m]++
	}
	if count["blocked-build"] != 1 || !strings.Contains(seen[len(seen)-1], "Template shared-tpl built") {
		t.Errorf("logs through B (each once, the summary last): %q", seen)
	}
	first.fake.mu.Lock()
	copied := first.fake.files["files/hash1/hello.txt"]
	first.fake.mu.Unlock()
	if copied != "shared hi\n" {
		t.Errorf("the build context A sent holds %q for the file uploaded through B", copied)
	}

	// A dies mid-build: its lease goes (as it does at the TTL's end).
	id2, build2 := a.requestBuild("orphan-tpl")
	spec2 := map[string]any{"fromTemplate": "base", "steps": []map[string]any{{"type": "RUN", "args": []string{"echo block-until-released"}}}}
	if res, body := a.call("POST", "/v2/templates/"+id2+"/builds/"+build2, spec2); res.StatusCode != http.StatusAccepted {
		t.Fatalf("start through A: %d %s", res.StatusCode, body)
	}
	testwait.For(t, 10*time.Second, "the second build running, seen through B", func() bool {
		st := b.poll(id2, build2, 0)
		return st.Status == "building" && len(st.LogEntries) > 1
	})
	if err := storeA.Close(); err != nil {
		t.Fatal(err)
	}
	st = b.poll(id2, build2, 0)
	if st.Status != "error" || st.Reason == nil || !strings.Contains(st.Reason.Message, "api-a") ||
		!strings.Contains(st.Reason.Message, "stopped before the build ended") {
		t.Fatalf("a build whose API server died, through B: %+v", st)
	}
	if last := st.LogEntries[len(st.LogEntries)-1]; last.Level != "error" || !strings.Contains(last.Message, "api-a") {
		t.Errorf("its last log entry: %+v", last)
	}
	close(first.fake.release) // A's build ends late: the error stands
	a.h.Close()
	if st := b.poll(id2, build2, 0); st.Status != "error" {
		t.Errorf("after A's late end: %s", st.Status)
	}
}

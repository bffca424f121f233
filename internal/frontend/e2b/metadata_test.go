package e2b_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/filesystem"
)

// TestFileMetadata checks envd 0.6.2's file metadata: X-Metadata-* headers of
// an upload are the file's metadata in the answer, in Stat, ListDir and Move
// (keys lowercased), an upload without them clears them, the owner is the
// requested user's, and bad metadata is refused with nothing written.
func TestFileMetadata(t *testing.T) {
	e := newEnv(t)
	c := e.create(nil)
	e.withAccounts(c.SandboxID)
	fs := e.filesystem(c, false)
	ctx := t.Context()
	want := map[string]string{"author": "mish", "purpose": "upload"}

	type info struct {
		Path     string            `json:"path"`
		Metadata map[string]string `json:"metadata"`
	}
	upload := func(path, body string, hdr ...string) (int, []info) {
		t.Helper()
		res, b := e.envdCall(c, "POST", "/files?username=user&path="+path, "application/octet-stream", []byte(body), hdr...)
		var out []info
		if res.StatusCode == http.StatusOK {
			if err := json.Unmarshal(b, &out); err != nil {
				t.Fatalf("upload answer %s: %v", b, err)
			}
		}
		return res.StatusCode, out
	}
	stat := func(path string) *pb.EntryInfo {
		t.Helper()
		st, err := fs.Stat(ctx, connect.NewRequest(&pb.StatRequest{Path: path}))
		if err != nil {
			t.Fatalf("stat %s: %v", path, err)
		}
		return st.Msg.GetEntry()
	}

	code, out := upload("/home/user/m/a.txt", "content", "X-Metadata-Author", "mish", "X-Metadata-PURPOSE", "upload")
	if code != http.StatusOK || len(out) != 1 || !maps.Equal(out[0].Metadata, want) {
		t.Fatalf("upload with metadata: %d %+v", code, out)
	}
	e1 := stat("/home/user/m/a.txt")
	if !maps.Equal(e1.GetMetadata(), want) || e1.GetSize() != 7 || e1.GetOwner() != "user" {
		t.Fatalf("stat after upload: %v", e1)
	}
	ls, err := fs.ListDir(ctx, connect.NewRequest(&pb.ListDirRequest{Path: "/home/user/m", Depth: 1}))
	if err != nil || len(ls.Msg.GetEntries()) != 1 || !maps.Equal(ls.Msg.GetEntries()[0].GetMetadata(), want) {
		t.Fatalf("list: %v %v", ls, err)
	}
	mv, err := fs.Move(ctx, connect.NewRequest(&pb.MoveRequest{Source: "/home/user/m/a.txt", Destination: "/home/user/m/b.txt"}))
	if err != nil || !maps.Equal(mv.Msg.GetEntry().GetMetadata(), want) {
		t.Fatalf("move: %v %v", mv, err)
	}
	res, b := e.envdCall(c, "GET", "/files?path=/home/user/m/b.txt", "", nil)
	if res.StatusCode != http.StatusOK || string(b) != "content" {
		t.Fatalf("read back: %d %q", res.StatusCode, b)
	}

	if code, out := upload("/home/user/m/b.txt", "second"); code != http.StatusOK || out[0].Metadata != nil {
		t.Fatalf("overwrite without metadata: %d %+v", code, out)
	}
	if e2 := stat("/home/user/m/b.txt"); e2.GetMetadata() != nil || e2.GetSize() != 6 {
		t.Fatalf("stale metadata after overwrite: %v", e2)
	}

	for name, hdr := range map[string][]string{
		"non-ASCII value": {"X-Metadata-Author", "m\u00efsh"},
		"long key":        {"X-Metadata-" + strings.Repeat("k", 247), "v"},
		"too much":        {"X-Metadata-A", strings.Repeat("v", 2100), "X-Metadata-B", strings.Repeat("v", 2100)},
	} {
		if code, _ := upload("/home/user/m/bad.txt", "x", hdr...); code != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", name, code)
		}
	}
	if _, err := fs.Stat(ctx, connect.NewRequest(&pb.StatRequest{Path: "/home/user/m/bad.txt"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("a refused upload left a file: %v", err)
	}
}

// TestMetrics checks GET /sandboxes/{id}/metrics: one sample of now with the
// sandbox's memory limit, CPU count and the disk df sees in it; none for a
// window in the past or the future; 400 for a bad window.
func TestMetrics(t *testing.T) {
	e := newEnv(t)
	c := e.create(map[string]any{"templateID": "base", "memoryMB": 512})
	type metric struct {
		Timestamp     time.Time `json:"timestamp"`
		TimestampUnix int64     `json:"timestampUnix"`
		CPUCount      int       `json:"cpuCount"`
		CPUUsedPct    float64   `json:"cpuUsedPct"`
		MemTotal      int64     `json:"memTotal"`
		MemUsed       int64     `json:"memUsed"`
		DiskTotal     int64     `json:"diskTotal"`
		DiskUsed      int64     `json:"diskUsed"`
	}
	get := func(query string) (int, []metric) {
		t.Helper()
		res, b := e.call("GET", "/sandboxes/"+c.SandboxID+"/metrics"+query, nil)
		var out []metric
		if res.StatusCode == http.StatusOK {
			if err := json.Unmarshal(b, &out); err != nil {
				t.Fatalf("metrics %s: %v", b, err)
			}
		}
		return res.StatusCode, out
	}
	before := time.Now().Add(-time.Second)
	code, ms := get("")
	if code != http.StatusOK || len(ms) != 1 {
		t.Fatalf("metrics: %d %+v", code, ms)
	}
	m := ms[0]
	if m.Timestamp.Before(before) || m.Timestamp.After(time.Now()) || m.TimestampUnix != m.Timestamp.Unix() {
		t.Errorf("timestamp %v, want now", m.Timestamp)
	}
	if m.CPUCount < 1 || m.CPUUsedPct < 0 || m.CPUUsedPct > 100 || m.MemTotal != 512<<20 || m.MemUsed < 0 {
		t.Errorf("cpu/memory sample %+v", m)
	}
	if m.DiskTotal <= 0 || m.DiskUsed <= 0 || m.DiskUsed > m.DiskTotal {
		t.Errorf("disk sample %+v, want what df sees", m)
	}
	now := time.Now().Unix()
	in := "?start=" + strconv.FormatInt(now-60, 10) + "&end=" + strconv.FormatInt(now, 10)
	if code, ms := get(in); code != http.StatusOK || len(ms) != 1 {
		t.Errorf("window holding now: %d %+v", code, ms)
	}
	past := "?start=" + strconv.FormatInt(now-3600, 10) + "&end=" + strconv.FormatInt(now-1800, 10)
	if code, ms := get(past); code != http.StatusOK || len(ms) != 0 {
		t.Errorf("window in the past: %d %+v", code, ms)
	}
	if code, ms := get("?start=" + strconv.FormatInt(now+3600, 10)); code != http.StatusOK || len(ms) != 0 {
		t.Errorf("window in the future: %d %+v", code, ms)
	}
	if code, _ := get("?start=yesterday"); code != http.StatusBadRequest {
		t.Errorf("bad start: %d, want 400", code)
	}
}

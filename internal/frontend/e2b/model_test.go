package e2b

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/pkg/api"
)

// TestAnswerShapes pins the JSON of the control plane's answers (E2B's
// Sandbox, SandboxDetail and ListedSandbox) field by field, as E2B's SDKs read
// them: the deprecated clientID, the domain, a null traffic token, metadata and
// volumeMounts always present, the access token and lifecycle only in the
// detail.
func TestAnswerShapes(t *testing.T) {
	h := New(nil, Options{Secret: []byte("0123456789abcdef0123456789abcdef")})
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	expires := created.Add(time.Hour)
	sb := api.Sandbox{ID: "sb-1", Image: "python", State: api.StateRunning, CPU: 1.5, MemoryBytes: 512 << 20,
		DiskBytes: 1 << 30, CreatedAt: created, ExpiresAt: &expires,
		Labels: map[string]string{labelTemplate: "python", labelOnTimeout: actionPause, labelAutoResume: "true", labelInternet: "false", "k": "v"}}
	tok := h.accessToken("sb-1")
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"Sandbox", h.sandboxAnswer(sb), `{"templateID":"python","sandboxID":"sb-1","alias":"python","clientID":"dsec",` +
			`"envdVersion":"` + EnvdVersion + `","envdAccessToken":"` + tok + `","domain":"localhost","trafficAccessToken":null}`},
		{"SandboxDetail", h.detail(sb), `{"templateID":"python","alias":"python","sandboxID":"sb-1","clientID":"dsec",` +
			`"startedAt":"2026-01-02T03:04:05Z","endAt":"2026-01-02T04:04:05Z","envdVersion":"` + EnvdVersion + `",` +
			`"envdAccessToken":"` + tok + `","domain":"localhost","allowInternetAccess":false,"cpuCount":2,"memoryMB":512,"diskSizeMB":1024,"metadata":{"k":"v"},` +
			`"state":"running","lifecycle":{"autoResume":true,"onTimeout":"pause"},"volumeMounts":[]}`},
		{"ListedSandbox", listed(api.Sandbox{ID: "sb-2", State: api.StatePaused, CreatedAt: created}),
			`{"templateID":"base","alias":"base","sandboxID":"sb-2","clientID":"dsec","startedAt":"2026-01-02T03:04:05Z",` +
				`"endAt":"9999-12-31T00:00:00Z","envdVersion":"` + EnvdVersion + `","cpuCount":0,"memoryMB":0,"diskSizeMB":0,` +
				`"metadata":{},"state":"paused","volumeMounts":[]}`},
	} {
		b, err := json.Marshal(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		if !sameJSON(t, b, []byte(tc.want)) {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, b, tc.want)
		}
	}
}

// sameJSON compares two JSON documents as values (key order aside).
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}

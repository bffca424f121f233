package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestReportJSON(t *testing.T) {
	var buf bytes.Buffer
	ctx := Start(context.Background(), "exec", []string{"bench", "exec"})
	if err := EncodeJSON(ctx, &buf, ExecResult{N: 5, P50ms: 1.5}); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	if got["bench"] != "exec" || got["n"] != 5.0 || got["p50_ms"] != 1.5 || got["commit"] == "" {
		t.Fatalf("got %s", buf.Bytes())
	}
	// A result may not shadow the envelope.
	type bad struct {
		Kernel string `json:"kernel"`
	}
	if err := EncodeJSON(ctx, &buf, bad{"x"}); err == nil || !strings.Contains(err.Error(), `"kernel"`) {
		t.Fatalf("a result with the envelope's key kernel: err %v", err)
	}
	if err := EncodeJSON(ctx, &buf, 3); err == nil {
		t.Fatal("a result that is no object: no error")
	}
}

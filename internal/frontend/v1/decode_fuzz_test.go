package v1

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// FuzzDecodeBodies: the JSON bodies of create, compose and fncall (single and
// batch) either decode (and then encode the same after a round trip) or are refused
// with invalid_argument or payload_too_large; create's validation never panics.
func FuzzDecodeBodies(f *testing.F) {
	for _, s := range []string{
		`{"image":"debian","cpu":1.5,"memory_bytes":1073741824,"env":{"A":"b"},"ttl_seconds":60}`,
		`{"image":"x","memory_bytes":-1}`, `{"image":"x","env":{"":"v"}}`, `{"image":"x","env":{"A=B":"v"}}`,
		`{"name":"env1","base":"debian","toolkits":["py"],"workspace":"ws"}`,
		`{"language":"python3","code":"print(1)","stdin":"","time_limit_ms":1000,"memory_limit_bytes":67108864}`,
		`{"calls":[{"language":"c","code":"int main(){}"}]}`, `{"calls":[]}`,
		`{"image":"x"} trailing`, `{"image":1}`, `[`, ``, "\x00", `{"cpu":1e400}`,
		`{"image":"` + strings.Repeat("a", 2000) + `"}`,
	} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, b []byte, which uint8) {
		targets := []func() any{
			func() any { return new(api.CreateSandboxRequest) },
			func() any { return new(api.ComposeImageRequest) },
			func() any { return new(api.FnCallRequest) },
			func() any { return new(api.FnCallBatchRequest) },
		}
		v := targets[int(which)%len(targets)]()
		err := decodeJSON(strings.NewReader(string(b)), 1<<10, v)
		if err != nil {
			if c := errdefs.CodeOf(err); c != api.CodeInvalidArgument && c != api.CodePayloadTooLarge {
				t.Fatalf("decode %T: error %v has code %s", v, err, c)
			}
			return
		}
		if c, ok := v.(*api.CreateSandboxRequest); ok {
			if err := c.Validate(); err != nil && errdefs.CodeOf(err) != api.CodeInvalidArgument {
				t.Fatalf("Validate: %v has code %s", err, errdefs.CodeOf(err))
			}
		}
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("re-encoding %T: %v", v, err)
		}
		w := targets[int(which)%len(targets)]()
		if err := decodeJSON(strings.NewReader(string(out)), 1<<20, w); err != nil {
			t.Fatalf("round trip of %s: %v", out, err)
		}
		if again, _ := json.Marshal(w); string(again) != string(out) {
			t.Fatalf("round trip changed %T: %s vs %s", v, out, again)
		}
	})
}

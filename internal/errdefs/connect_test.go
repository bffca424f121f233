package errdefs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"connectrpc.com/connect"

	"github.com/dsec-dev/dsec/pkg/api"
)

// TestConnectCodes pins the error-code → Connect-code table: what a Connect
// client (the node RPC's caller, E2B's SDK) sees for each class.
func TestConnectCodes(t *testing.T) {
	want := map[connect.Code][]api.Code{
		connect.CodeUnauthenticated:    {api.CodeUnauthorized},
		connect.CodePermissionDenied:   {api.CodePermissionDenied},
		connect.CodeInvalidArgument:    {api.CodeInvalidArgument},
		connect.CodeNotFound:           {api.CodeNotFound},
		connect.CodeAlreadyExists:      {api.CodeAlreadyExists},
		connect.CodeFailedPrecondition: {api.CodeConflict, api.CodeTrajectoryDiverged, api.CodeOutcomeUnknown, api.CodeStartFailed},
		connect.CodeResourceExhausted:  {api.CodePayloadTooLarge, api.CodeResourceExhausted, api.CodeQuotaExceeded},
		connect.CodeDeadlineExceeded:   {api.CodeDeadlineExceeded},
		connect.CodeUnavailable: {api.CodeSandboxGone, api.CodeTrajectorySandboxLost, api.CodeUnavailable,
			api.CodeNodeLost, api.CodeBadGateway},
		connect.CodeUnimplemented: {api.CodeNotImplemented},
		connect.CodeInternal:      {api.CodeInternal},
	}
	n := 0
	for cc, codes := range want {
		for _, c := range codes {
			n++
			if got := ConnectCode(c); got != cc {
				t.Errorf("ConnectCode(%s) = %s, want %s", c, got, cc)
			}
		}
	}
	if n != len(connectCodes) {
		t.Errorf("the table has %d classes, the test pins %d", len(connectCodes), n)
	}
	if got := ConnectCode("no_such_class"); got != connect.CodeUnknown {
		t.Errorf("an unknown class maps to %s, want unknown", got)
	}
}

// TestConnectCodesCoverEveryClass: every error code pkg/api declares has a
// Connect code, so a new class cannot travel as Unknown by omission.
func TestConnectCodesCoverEveryClass(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../../pkg/api/errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := 0
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
			return true
		}
		for _, v := range vs.Values {
			lit, ok := v.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				continue
			}
			declared++
			code := api.Code(lit.Value[1 : len(lit.Value)-1])
			if _, ok := connectCodes[code]; !ok {
				t.Errorf("error code %q has no Connect code", code)
			}
		}
		return true
	})
	if declared < 15 {
		t.Fatalf("found only %d error codes in pkg/api/errors.go", declared)
	}
}

// TestFromConnectLayer: a refusal of the Connect layer reads back as the class
// that travels with the same Connect code, and nothing else is classified.
func TestFromConnectLayer(t *testing.T) {
	for c := connect.Code(1); c <= connect.CodeUnauthenticated; c++ {
		code, ok := FromConnectLayer(c)
		if !ok {
			continue
		}
		if ConnectCode(code) != c {
			t.Errorf("%s reads back as %s, which travels as %s", c, code, ConnectCode(code))
		}
	}
	if code, ok := FromConnectLayer(connect.CodeResourceExhausted); !ok || code != api.CodePayloadTooLarge {
		t.Errorf("an over-limit message reads as %q %v, want payload_too_large", code, ok)
	}
	for _, c := range []connect.Code{connect.CodeUnavailable, connect.CodeUnknown, connect.CodeCanceled, connect.CodeInternal} {
		if code, ok := FromConnectLayer(c); ok {
			t.Errorf("%s classified as %s; it is no refusal of the Connect layer", c, code)
		}
	}
}

package fullvm

import (
	"reflect"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

func TestTextStrokes(t *testing.T) {
	got, err := textStrokes("aZ >\n")
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"a"}, {"shift", "z"}, {"spc"}, {"shift", "dot"}, {"ret"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("textStrokes = %v, want %v", got, want)
	}
	for _, bad := range []string{"caf\u00e9", "\x00", "a\rb"} {
		if _, err := textStrokes(bad); !errdefs.Is(err, api.CodeInvalidArgument) {
			t.Errorf("textStrokes(%q) = %v, want invalid_argument", bad, err)
		}
	}
}

func TestChord(t *testing.T) {
	for in, want := range map[string][]string{
		"ctrl-c": {"ctrl", "c"}, "Return": {"ret"}, "alt-F4": {"alt", "f4"}, "ctrl-alt-delete": {"ctrl", "alt", "delete"},
	} {
		if got, err := chord(in); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("chord(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "ctrl-", "hyperspace", "ctrl--c"} {
		if _, err := chord(bad); !errdefs.Is(err, api.CodeInvalidArgument) {
			t.Errorf("chord(%q) = %v, want invalid_argument", bad, err)
		}
	}
}

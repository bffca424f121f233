package session

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// TestCreateEach: a batch is made whole, in request order; when a member
// fails, what was made is deleted, nothing after it starts, and the error
// names the member and keeps its class.
func TestCreateEach(t *testing.T) {
	var mu sync.Mutex
	var made, deleted []string
	var skipped []int
	create := func(failAt int) func(context.Context, int) (api.Sandbox, error) {
		return func(_ context.Context, i int) (api.Sandbox, error) {
			if i == failAt {
				return api.Sandbox{}, errdefs.Exhausted(0, "node full")
			}
			mu.Lock()
			defer mu.Unlock()
			made = append(made, fmt.Sprint("sb-", i))
			return api.Sandbox{ID: fmt.Sprint("sb-", i)}, nil
		}
	}
	del := func(_ context.Context, id string) error {
		mu.Lock()
		defer mu.Unlock()
		deleted = append(deleted, id)
		return nil
	}
	unstarted := func(i int) { skipped = append(skipped, i) }

	out, err := CreateEach(context.Background(), 20, 4, create(-1), del, unstarted)
	if err != nil || len(out) != 20 || len(deleted) != 0 || len(skipped) != 0 {
		t.Fatalf("whole batch: %d made, %v, deleted %v, skipped %v", len(out), err, deleted, skipped)
	}
	for i, sb := range out {
		if sb.ID != fmt.Sprint("sb-", i) {
			t.Fatalf("out[%d] = %s: not in request order", i, sb.ID)
		}
	}

	made, deleted = nil, nil
	out, err = CreateEach(context.Background(), 6, 1, create(2), del, unstarted)
	if out != nil || !errdefs.Is(err, api.CodeResourceExhausted) || !strings.Contains(err.Error(), "sandboxes[2]") {
		t.Fatalf("failed batch: %v, %v", out, err)
	}
	slices.Sort(deleted)
	if !slices.Equal(made, []string{"sb-0", "sb-1"}) || !slices.Equal(deleted, made) {
		t.Errorf("made %v, deleted %v: want the two before the failure made and deleted", made, deleted)
	}
	if !slices.Equal(skipped, []int{3, 4, 5}) {
		t.Errorf("skipped %v, want the three after the failure", skipped)
	}
}

package client

import (
	"context"
	"net/http"
	"testing"

	"github.com/dsec-dev/dsec/pkg/api"
)

func TestListPage(t *testing.T) {
	c, node := setup(t)
	ctx := context.Background()
	var ids []string
	for i := range 5 {
		team := "a"
		if i%2 == 1 {
			team = "b"
		}
		sb, err := c.Create(ctx, api.CreateSandboxRequest{Labels: map[string]string{"team": team}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	if _, err := node.Pause(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	// Every page of team=a, newest first, two at a time.
	var got []string
	o := ListOptions{Labels: []string{"team=a"}, Limit: 2, Newest: true}
	for {
		page, err := c.ListPage(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if page.Total == nil || *page.Total != 3 {
			t.Fatalf("total %v, want 3", page.Total)
		}
		for _, sb := range page.Sandboxes {
			got = append(got, sb.ID)
		}
		if page.NextCursor == "" {
			break
		}
		o.Cursor = page.NextCursor
	}
	if want := []string{ids[4], ids[2], ids[0]}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("pages %v, want %v", got, want)
	}
	page, err := c.ListPage(ctx, ListOptions{States: []string{api.StatePaused, api.StateExited}})
	if err != nil || len(page.Sandboxes) != 1 || page.Sandboxes[0].ID != ids[0] || page.Total != nil {
		t.Errorf("paused: %+v %v", page, err)
	}
	_, err = c.ListPage(ctx, ListOptions{States: []string{"asleep"}})
	wantCode(t, err, api.CodeInvalidArgument, http.StatusBadRequest)
}

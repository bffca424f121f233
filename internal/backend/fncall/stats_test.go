package fncall

import (
	"context"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Pools reports a started pool's slots, and a call in flight as a busy slot.
func TestPoolsOccupancy(t *testing.T) {
	e := testEngine(t)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := e.Call(ctx, api.FnCallRequest{Language: api.LangBash, Files: map[string]string{"main.sh": "sleep 1"}, Tests: []api.FnCallTest{{}}})
		done <- err
	}()
	deadline := time.Now().Add(60 * time.Second)
	busy := testwait.Until(time.Until(deadline), func() bool {
		for _, p := range e.Pools() {
			if p.Image == DefaultImage && p.Busy >= 1 && p.Slots == e.cfg.Zygotes*e.cfg.SlotsPerZygote {
				return true
			}
		}
		return false
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !busy {
		t.Fatalf("no busy slot seen while a call ran: %+v", e.Pools())
	}
	// A slot goes back to the pool once its run has been reaped, just after
	// the call's answer.
	idle := testwait.Until(time.Until(deadline), func() bool {
		idle := true
		for _, p := range e.Pools() {
			idle = idle && p.Busy == 0
		}
		return idle
	})
	if !idle {
		t.Fatalf("busy slots long after every call ended: %+v", e.Pools())
	}
}

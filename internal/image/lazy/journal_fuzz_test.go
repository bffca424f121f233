package lazy

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
)

// The holder journal (state.go): a takeover replays ROOT/layerd.journal onto
// the saved state. The fuzzers write journals as layerd does and as a crash or a
// hostile file leaves them.

func journalState() savedState {
	return savedState{Version: stateVersion, NextNode: 9, Layers: []savedLayer{
		{Hex: "aa", Digest: "sha256:aa", Store: "file:///s", Size: 10, Chunk: 4096, Node: 2, Holders: []string{"h1", "h2"}},
		{Hex: "bb", Digest: "sha256:bb", Store: "file:///s", Size: 20, Chunk: 4096, Node: 3},
	}}
}

// holderSets is the state's holders by layer.
func holderSets(st savedState) map[string][]string {
	m := map[string][]string{}
	for _, l := range st.Layers {
		h := slices.Clone(l.Holders)
		slices.Sort(h)
		m[l.Hex] = h
	}
	return m
}

// replayed writes journal under a new root and replays it onto journalState.
func replayed(t *testing.T, journal []byte) savedState {
	root := t.TempDir()
	if err := os.WriteFile(journalPath(root), journal, 0o600); err != nil {
		t.Fatal(err)
	}
	st := journalState()
	replayJournal(root, &st)
	return st
}

// FuzzJournalRoundTrip: the changes layerd journals (as journalLocked writes
// them), cut anywhere by a crash, replay to exactly the changes whose line was
// written whole, applied in order.
func FuzzJournalRoundTrip(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3}, uint16(0xffff))
	f.Add([]byte{1, 1, 1, 5, 0, 7}, uint16(40))
	f.Add([]byte("\x00\x02\x04\x06\x01\x03"), uint16(3))
	f.Fuzz(func(t *testing.T, ops []byte, cut uint16) {
		// Each byte is a change: bit 0 the op, bit 1 the layer (one unknown to the
		// state: ignored), bits 2.. the holder.
		var cs []holderChange
		for _, b := range ops {
			c := holderChange{Op: "+", Layer: "aa", Holder: fmt.Sprintf("h%d", b>>3)}
			if b&1 == 1 {
				c.Op = "-"
			}
			switch b >> 1 & 3 {
			case 1:
				c.Layer = "bb"
			case 2:
				c.Layer = "cc" // not in the state
			}
			cs = append(cs, c)
		}
		root := t.TempDir()
		j, err := os.OpenFile(journalPath(root), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		d := &Daemon{journal: j, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		d.journalLocked(cs)
		j.Close()
		b, err := os.ReadFile(journalPath(root))
		if err != nil && len(cs) > 0 {
			t.Fatal(err)
		}
		b = b[:min(len(b), int(cut))]
		// The model: apply the changes whose JSON was written whole.
		want := journalState()
		sets := map[string]map[string]bool{}
		for _, l := range want.Layers {
			sets[l.Hex] = map[string]bool{}
			for _, h := range l.Holders {
				sets[l.Hex][h] = true
			}
		}
		off := 0
		for _, c := range cs {
			line, _ := json.Marshal(c)
			if off+len(line) > len(b) {
				break
			}
			off += len(line) + 1
			if sets[c.Layer] == nil {
				continue
			}
			if c.Op == "+" {
				sets[c.Layer][c.Holder] = true
			} else {
				delete(sets[c.Layer], c.Holder)
			}
		}
		for i, l := range want.Layers {
			want.Layers[i].Holders = nil
			for h := range sets[l.Hex] {
				want.Layers[i].Holders = append(want.Layers[i].Holders, h)
			}
		}
		got := replayed(t, b)
		if g, w := holderSets(got), holderSets(want); fmt.Sprint(g) != fmt.Sprint(w) {
			t.Fatalf("journal %q replays to %v, want %v", b, g, w)
		}
	})
}

// FuzzReplayJournal: any journal file (a hostile or damaged one) replays
// without a panic, changes nothing but the holders of the saved layers, adds
// no layer and no holder twice; a holder it adds has a "+" line for its layer,
// a holder it drops a "-" line.
func FuzzReplayJournal(f *testing.F) {
	f.Add([]byte(`{"op":"+","layer":"aa","holder":"h3"}` + "\n" + `{"op":"-","layer":"aa","holder":"h1"}` + "\n"))
	f.Add([]byte(`{"op":"+","layer":"bb","holder":"x"}` + "\n" + `{"op":"+","layer":"bb","hol`))
	f.Add([]byte(`{"op":"+","layer":"zz","holder":"x"}` + "\n\n\x00" + `[1,2]` + "\n" + `{"op":"*"}`))
	f.Add([]byte(`{"op":"+","layer":"aa","holder":"h1"}` + "\r\n" + `{"op":"+","layer":"aa","holder":"h1","op":"-"}`))
	f.Add([]byte(`{"op":"+","layer":"aa","holder":"\u0068\u0034"}` + "\n"))
	f.Fuzz(func(t *testing.T, journal []byte) {
		before := journalState()
		got := replayed(t, journal)
		if len(got.Layers) != len(before.Layers) || got.NextNode != before.NextNode || got.Version != before.Version {
			t.Fatalf("the journal changed the state's layers: %+v", got)
		}
		lines := map[holderChange]bool{}
		for _, line := range strings.Split(string(journal), "\n") {
			var c holderChange
			if json.Unmarshal([]byte(line), &c) == nil {
				lines[c] = true
			}
		}
		for i, l := range got.Layers {
			b := before.Layers[i]
			if l.Hex != b.Hex || l.Digest != b.Digest || l.Node != b.Node || l.Size != b.Size || l.Store != b.Store {
				t.Fatalf("the journal changed layer %s: %+v", b.Hex, l)
			}
			seen := map[string]bool{}
			for _, h := range l.Holders {
				if seen[h] {
					t.Fatalf("layer %s: holder %q twice", l.Hex, h)
				}
				seen[h] = true
				if !slices.Contains(b.Holders, h) && !lines[holderChange{Op: "+", Layer: l.Hex, Holder: h}] {
					t.Fatalf("layer %s: holder %q added without a + line", l.Hex, h)
				}
			}
			for _, h := range b.Holders {
				if !seen[h] && !lines[holderChange{Op: "-", Layer: l.Hex, Holder: h}] {
					t.Fatalf("layer %s: holder %q dropped without a - line", l.Hex, h)
				}
			}
		}
	})
}

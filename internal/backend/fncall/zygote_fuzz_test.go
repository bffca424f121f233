package fncall

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// encodeEvent is struct ev as dsec-fncall writes it.
func encodeEvent(e event) []byte {
	b := make([]byte, evSize)
	le := binary.LittleEndian
	le.PutUint32(b[0:], e.kind)
	le.PutUint32(b[4:], uint32(e.err))
	le.PutUint64(b[8:], e.id)
	le.PutUint32(b[16:], uint32(e.pid))
	le.PutUint32(b[20:], uint32(e.status))
	le.PutUint64(b[24:], uint64(e.utimeUs))
	le.PutUint64(b[32:], uint64(e.stimeUs))
	le.PutUint64(b[40:], uint64(e.maxRSSKB))
	copy(b[48:], e.msg) // NUL-terminated when shorter than the field
	return b
}

// FuzzParseEvent: any bytes parse or are refused without a panic; an event of
// the wire size round-trips (its message up to the first NUL).
func FuzzParseEvent(f *testing.F) {
	f.Add(encodeEvent(event{kind: evExit, id: 7, pid: 1234, status: 256, utimeUs: 10, maxRSSKB: 2048}))
	f.Add(encodeEvent(event{kind: evFatal, err: 12, msg: "clone3"}))
	f.Add(encodeEvent(event{kind: evTrace, id: 1, msg: strings.Repeat("x", 100)}))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := parseEvent(b)
		if len(b) != evSize {
			if err == nil {
				t.Fatalf("an event of %d bytes was accepted", len(b))
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.IndexByte(e.msg, 0) >= 0 || len(e.msg) > evSize-48 {
			t.Fatalf("message %q: a NUL or past the event", e.msg)
		}
		again := encodeEvent(e)
		e2, err := parseEvent(again)
		if err != nil || e2 != e {
			t.Fatalf("event %+v re-encoded parses as %+v (%v)", e, e2, err)
		}
		if !bytes.Equal(again[:48], b[:48]) {
			t.Fatalf("header %x re-encoded as %x", b[:48], again[:48])
		}
	})
}

// FuzzZygoteEvents: the engine's reader of the zygote's events, over a real
// SOCK_SEQPACKET pair. Whatever datagrams arrive (short, long, unknown kinds,
// unknown IDs, a fatal event), the reader hands each run only well-formed
// events with its own ID, stops at a fatal event or at the socket's end
// (failing the zygote), and never panics or blocks.
func FuzzZygoteEvents(f *testing.F) {
	seed := func(es ...[]byte) []byte {
		var b []byte
		for _, e := range es {
			b = append(b, byte(len(e)))
			b = append(b, e...)
		}
		return b
	}
	f.Add(seed(encodeEvent(event{kind: evStarted, id: 1, pid: 9}), encodeEvent(event{kind: evExit, id: 1})))
	f.Add(seed(encodeEvent(event{kind: evPrepared, id: 0}), encodeEvent(event{kind: evExit, id: 3}), []byte{4, 0, 0}))
	f.Add(seed(encodeEvent(event{kind: evFatal, err: 1, msg: "boom"}), encodeEvent(event{kind: evExit, id: 2})))
	f.Add(seed(encodeEvent(event{kind: evExit, id: 99})))
	f.Fuzz(func(t *testing.T, stream []byte) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		peer := fds[1]
		ours := os.NewFile(uintptr(fds[0]), "zygote")
		fc, err := net.FileConn(ours)
		ours.Close()
		if err != nil {
			unix.Close(peer)
			t.Fatal(err)
		}
		defer fc.Close()
		z := &zygote{conn: fc.(*net.UnixConn), dead: make(chan struct{}), pending: map[uint64]chan event{}}
		var mu sync.Mutex
		got := map[uint64][]event{}
		var wg sync.WaitGroup
		chans := map[uint64]chan event{}
		for id := range uint64(3) {
			ch := make(chan event, 8)
			chans[id] = ch
			z.pending[id] = ch
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case e := <-ch:
						mu.Lock()
						got[id] = append(got[id], e)
						mu.Unlock()
					case <-z.dead:
						return
					}
				}
			}()
		}
		done := make(chan struct{})
		go func() { z.readLoop(); close(done) }()
		// The datagrams: a length byte (times 2: up to 510 bytes), then the bytes.
		var sent [][]byte
		for len(stream) > 0 {
			n := min(int(stream[0])*2, len(stream)-1)
			if stream[0] == byte(evSize/2) {
				n = min(evSize, len(stream)-1)
			}
			d := stream[1 : 1+n]
			stream = stream[1+n:]
			if len(d) == 0 {
				continue // a zero-length datagram reads as the end
			}
			if err := unix.Send(peer, d, 0); err != nil {
				t.Fatal(err)
			}
			sent = append(sent, d)
		}
		unix.Close(peer)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the reader did not stop at the end of the socket")
		}
		<-z.dead
		wg.Wait()
		for id, ch := range chans { // what arrived after the drainers stopped
			for len(ch) > 0 {
				got[id] = append(got[id], <-ch)
			}
		}
		// The model: the well-formed events up to the first fatal one.
		want := map[uint64][]event{}
		for _, d := range sent {
			e, err := parseEvent(d)
			if err != nil {
				continue
			}
			if e.kind == evFatal {
				if !strings.Contains(z.deadErr().Error(), e.msg) {
					t.Fatalf("a fatal event %q failed the zygote with %v", e.msg, z.deadErr())
				}
				if _, ok := z.pending[0]; ok {
					want[0] = append(want[0], e)
				}
				break
			}
			if e.id < 3 {
				want[e.id] = append(want[e.id], e)
			}
		}
		// A fatal event is offered to the zygote's own waiter (ID 0) without
		// blocking: it may be dropped when that waiter's buffer is full.
		if n := len(want[0]); n > 0 && want[0][n-1].kind == evFatal && len(got[0]) == n-1 {
			want[0] = want[0][:n-1]
		}
		for id := range uint64(3) {
			if len(got[id]) != len(want[id]) {
				t.Fatalf("run %d got %d events, want %d: %+v", id, len(got[id]), len(want[id]), got[id])
			}
			for i := range got[id] {
				if got[id][i] != want[id][i] {
					t.Fatalf("run %d event %d: %+v, want %+v", id, i, got[id][i], want[id][i])
				}
			}
		}
	})
}

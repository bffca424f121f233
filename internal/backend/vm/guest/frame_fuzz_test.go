package guest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"testing"
)

func frameBytes(typ, stream int, ch uint32, body []byte) []byte {
	var h [hdrLen]byte
	binary.LittleEndian.PutUint16(h[:], magic)
	h[2], h[3] = byte(typ), byte(stream)
	binary.LittleEndian.PutUint32(h[4:], ch)
	binary.LittleEndian.PutUint32(h[8:], uint32(len(body)))
	return append(h[:], body...)
}

// TestReadFrameResync: garbage before a frame (a previous host's half-read
// frame) is skipped, and an oversized length is not trusted.
func TestReadFrameResync(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("junk\xec\xd5")
	b.Write(frameBytes(9, 0, 1, nil)[:hdrLen]) // bad type: skipped byte by byte
	over := frameBytes(tData, 1, 2, nil)
	binary.LittleEndian.PutUint32(over[8:], maxFrame+1)
	b.Write(over)
	b.Write(frameBytes(tReq, 0, 7, []byte("PONG\x00")))
	typ, _, ch, body, err := readFrame(bufio.NewReader(&b))
	if err != nil || typ != tReq || ch != 7 || string(body) != "PONG\x00" {
		t.Fatalf("readFrame = %d %d %q %v, want the REQ frame on channel 7", typ, ch, body, err)
	}
}

// FuzzReadFrame: whatever a guest sends, readFrame returns frames within
// the limits or an error, and never panics.
func FuzzReadFrame(f *testing.F) {
	f.Add(frameBytes(tReq, 0, 1, []byte("STARTED\x00pid=5\x00")))
	f.Add(frameBytes(tData, 1, 3, []byte("hello")))
	f.Add([]byte("\xec\xd5\x03\x01\x01\x00\x00\x00\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		for {
			typ, _, _, body, err := readFrame(r)
			if err != nil {
				return
			}
			if typ < tHello || typ > tClose || len(body) > maxFrame {
				t.Fatalf("frame type %d, %d bytes", typ, len(body))
			}
		}
	})
}

// Package dnstcp frames DNS messages on a stream (RFC 1035 §4.2.2: each
// message is preceded by its length as two bytes, big-endian), as DNS over
// TCP sends them.
package dnstcp

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Read reads one length-prefixed message from r.
func Read(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// Write writes msg to w with its length prefix, in one write.
func Write(w io.Writer, msg []byte) error {
	if len(msg) > 0xffff {
		return fmt.Errorf("dns message of %d bytes: longer than a TCP frame holds", len(msg))
	}
	_, err := w.Write(append(binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(msg)), uint16(len(msg))), msg...))
	return err
}

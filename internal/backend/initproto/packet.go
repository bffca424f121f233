package initproto

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxPacket is the largest request the init accepts.
const MaxPacket = 128 << 10

// Field is one key=value entry of a packet.
type Field struct{ Key, Value string }

// Packet is one control message: an op followed by key=value fields, in order.
type Packet struct {
	Op     string
	Fields []Field
}

// NewPacket returns a packet with op and no fields.
func NewPacket(op string) *Packet { return &Packet{Op: op} }

// Add appends a field; repeated keys are allowed and keep their order.
func (p *Packet) Add(key, value string) *Packet {
	p.Fields = append(p.Fields, Field{key, value})
	return p
}

// Get returns the value of the first field named key.
func (p *Packet) Get(key string) (string, bool) {
	for _, f := range p.Fields {
		if f.Key == key {
			return f.Value, true
		}
	}
	return "", false
}

// All returns the values of every field named key, in order.
func (p *Packet) All(key string) []string {
	var vs []string
	for _, f := range p.Fields {
		if f.Key == key {
			vs = append(vs, f.Value)
		}
	}
	return vs
}

// Int returns the first field named key as an integer.
func (p *Packet) Int(key string) (int64, error) {
	v, ok := p.Get(key)
	if !ok {
		return 0, fmt.Errorf("initproto: %s packet without %s", p.Op, key)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("initproto: %s packet: bad %s: %w", p.Op, key, err)
	}
	return n, nil
}

// Encode serializes the packet. Strings may not contain NUL, keys may not
// contain '=', the op may not be empty or contain '='.
func (p *Packet) Encode() ([]byte, error) {
	if p.Op == "" || strings.ContainsAny(p.Op, "=\x00") {
		return nil, fmt.Errorf("initproto: bad op %q", p.Op)
	}
	n := len(p.Op) + 1
	for _, f := range p.Fields {
		if f.Key == "" || strings.ContainsAny(f.Key, "=\x00") {
			return nil, fmt.Errorf("initproto: bad key %q", f.Key)
		}
		if strings.IndexByte(f.Value, 0) >= 0 {
			return nil, fmt.Errorf("initproto: NUL in value of %s", f.Key)
		}
		n += len(f.Key) + len(f.Value) + 2
	}
	if n > MaxPacket {
		return nil, fmt.Errorf("initproto: %s packet is %d bytes, limit %d", p.Op, n, MaxPacket)
	}
	b := make([]byte, 0, n)
	b = append(append(b, p.Op...), 0)
	for _, f := range p.Fields {
		b = append(append(append(append(b, f.Key...), '='), f.Value...), 0)
	}
	return b, nil
}

// errMalformed is returned by ParsePacket for anything that is not a packet.
var errMalformed = errors.New("initproto: malformed packet")

// ParsePacket parses one packet: NUL-terminated strings, the first a non-empty
// op without '=', every other one key=value with a non-empty key.
func ParsePacket(b []byte) (*Packet, error) {
	if len(b) == 0 || b[len(b)-1] != 0 {
		return nil, fmt.Errorf("%w: not NUL-terminated", errMalformed)
	}
	parts := bytes.Split(b[:len(b)-1], []byte{0})
	op := string(parts[0])
	if op == "" || strings.IndexByte(op, '=') >= 0 {
		return nil, fmt.Errorf("%w: bad op %q", errMalformed, op)
	}
	p := &Packet{Op: op, Fields: make([]Field, 0, len(parts)-1)}
	for _, part := range parts[1:] {
		k, v, ok := bytes.Cut(part, []byte{'='})
		if !ok || len(k) == 0 {
			return nil, fmt.Errorf("%w: bad field %q", errMalformed, part)
		}
		p.Fields = append(p.Fields, Field{string(k), string(v)})
	}
	return p, nil
}

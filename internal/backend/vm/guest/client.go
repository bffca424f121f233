// Package guest is the host side of dsec-vmagent's protocol (csrc/vmagent):
// one byte stream (QEMU's virtio-serial port, reached through a unix socket)
// multiplexed into channels by 12-byte frame headers. Each channel carries
// one request packet (internal/backend/initproto's encoding: EXEC, WAIT, SIGNAL, PS,
// PING, DIAL, the file ops), its replies, and the stream data that follows
// (process stdin/stdout/stderr, a TCP connection, a file's bytes).
//
// Connect sends HELLO with a nonce and skips whatever the port still held
// from an earlier host process until the agent echoes it, so a restarted node
// agent starts on a clean stream.
package guest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/initproto"
)

// Frame types (csrc/vmagent).
const (
	tHello = 1
	tReq   = 2
	tData  = 3
	tEOF   = 4
	tClose = 5

	magic    = 0xD5EC
	hdrLen   = 12
	maxFrame = 256 << 10
	chunk    = 32 << 10
)

// ErrClosed is returned by every channel once the connection is gone.
var ErrClosed = errors.New("guest: connection to the agent closed")

// Client is one connection to a guest agent.
type Client struct {
	nc  net.Conn
	wmu sync.Mutex
	mu  sync.Mutex
	ch  map[uint32]*Chan
	nxt uint32
	err error
	dn  chan struct{}
}

// Connect dials the agent's socket and synchronises the stream.
func Connect(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	var nc net.Conn
	for {
		var err error
		nc, err = d.DialContext(ctx, "unix", path)
		if err == nil {
			break
		}
		// QEMU binds the socket before it listens on it.
		if !errors.Is(err, syscall.ECONNREFUSED) || ctx.Err() != nil {
			return nil, fmt.Errorf("guest: dial agent: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("guest: dial agent: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	c := &Client{nc: nc, ch: map[uint32]*Chan{}, dn: make(chan struct{})}
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	br := bufio.NewReaderSize(nc, 256<<10)
	// A hello can be lost when the channel has just been moved to a new socket
	// (a re-adopting driver's chardev-change): the guest may still be parsing
	// the old client's bytes. So it is sent again, with a fresh nonce, every
	// helloRetry until the guest answers the latest one; the guest handles
	// frames in order, so once that answer is in no earlier hello is pending
	// (each hello resets the guest's channels).
	nonce := make([]byte, 16)
	for {
		if ctx.Err() != nil {
			nc.Close()
			return nil, fmt.Errorf("guest: waiting for the agent's hello: %w", ctx.Err())
		}
		_, _ = rand.Read(nonce)
		if err := c.write(tHello, 0, 0, nonce); err != nil {
			nc.Close()
			return nil, err
		}
		_ = nc.SetReadDeadline(time.Now().Add(helloRetry))
		answered, err := awaitHello(br, nonce)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			nc.Close()
			return nil, fmt.Errorf("guest: waiting for the agent's hello: %w", err)
		}
		if answered {
			break
		}
	}
	_ = nc.SetReadDeadline(time.Time{})
	if !stop() {
		nc.Close()
		return nil, fmt.Errorf("guest: waiting for the agent's hello: %w", ctx.Err())
	}
	go c.readLoop(br)
	return c, nil
}

// helloRetry is how long Connect waits for the answer to one hello before it
// sends another.
const helloRetry = 2 * time.Second

// awaitHello reads frames until the hello answering nonce (true) or an error
// (a read deadline: no answer yet).
func awaitHello(br *bufio.Reader, nonce []byte) (bool, error) {
	for {
		typ, _, _, body, err := readFrame(br)
		if err != nil {
			return false, err
		}
		if typ == tHello && string(body) == string(nonce) {
			return true, nil
		}
	}
}

// readFrame reads one frame, skipping bytes until a valid header.
func readFrame(r *bufio.Reader) (typ, stream int, ch uint32, body []byte, err error) {
	for {
		h, err := r.Peek(hdrLen)
		if err != nil {
			return 0, 0, 0, nil, err
		}
		n := binary.LittleEndian.Uint32(h[8:])
		if binary.LittleEndian.Uint16(h) != magic || h[2] < tHello || h[2] > tClose || n > maxFrame {
			_, _ = r.Discard(1)
			continue
		}
		typ, stream, ch = int(h[2]), int(h[3]), binary.LittleEndian.Uint32(h[4:])
		_, _ = r.Discard(hdrLen)
		body = make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return 0, 0, 0, nil, err
		}
		return typ, stream, ch, body, nil
	}
}

// appendFrame appends one frame to b.
func appendFrame(b []byte, typ, stream int, ch uint32, body []byte) []byte {
	var h [hdrLen]byte
	binary.LittleEndian.PutUint16(h[:], magic)
	h[2], h[3] = byte(typ), byte(stream)
	binary.LittleEndian.PutUint32(h[4:], ch)
	binary.LittleEndian.PutUint32(h[8:], uint32(len(body)))
	return append(append(b, h[:]...), body...)
}

func (c *Client) write(typ, stream int, ch uint32, body []byte) error {
	return c.writeRaw(appendFrame(make([]byte, 0, hdrLen+len(body)), typ, stream, ch, body))
}

// writeRaw writes whole frames in one write (one wakeup of the guest).
func (c *Client) writeRaw(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.nc.Write(b); err != nil {
		return fmt.Errorf("guest: write: %w", err)
	}
	return nil
}

func (c *Client) readLoop(r *bufio.Reader) {
	var err error
	for {
		var typ, stream int
		var id uint32
		var body []byte
		typ, stream, id, body, err = readFrame(r)
		if err != nil {
			break
		}
		c.mu.Lock()
		ch := c.ch[id]
		c.mu.Unlock()
		if ch == nil {
			continue
		}
		switch typ {
		case tReq:
			p, perr := initproto.ParsePacket(body)
			if perr != nil {
				err = perr
				break
			}
			ch.replies.push(p)
		case tData:
			if stream == 1 || stream == 2 {
				ch.streams[stream-1].write(body)
			}
		case tEOF:
			if stream == 1 || stream == 2 {
				ch.streams[stream-1].close(io.EOF)
			}
		}
	}
	c.mu.Lock()
	c.err = fmt.Errorf("%w: %v", ErrClosed, err)
	chs := c.ch
	c.ch = map[uint32]*Chan{}
	c.mu.Unlock()
	for _, ch := range chs {
		ch.fail(c.err)
	}
	close(c.dn)
}

// Done is closed when the connection is gone.
func (c *Client) Done() <-chan struct{} { return c.dn }

// Close closes the connection; the guest's processes keep running.
func (c *Client) Close() error { return c.nc.Close() }

// Open starts a channel.
func (c *Client) Open() (*Chan, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, c.err
	}
	c.nxt++
	ch := &Chan{c: c, id: c.nxt, replies: newQueue()}
	ch.streams[0], ch.streams[1] = newPipe(), newPipe()
	c.ch[ch.id] = ch
	return ch, nil
}

// Chan is one channel: one request, its replies and its streams.
type Chan struct {
	c       *Client
	id      uint32
	replies *queue
	streams [2]*pipe
	once    sync.Once
}

func (ch *Chan) fail(err error) {
	ch.replies.fail(err)
	ch.streams[0].close(err)
	ch.streams[1].close(err)
}

// Send sends a request (or a control packet such as KILL) on the channel.
func (ch *Chan) Send(p *initproto.Packet) error {
	b, err := p.Encode()
	if err != nil {
		return err
	}
	return ch.c.write(tReq, 0, ch.id, b)
}

// SendClosed sends a request and the end of the data sent to the guest
// (CloseWrite) in one write: a process without stdin gets its EOF in the
// same wakeup of the guest as its EXEC.
func (ch *Chan) SendClosed(p *initproto.Packet) error {
	b, err := p.Encode()
	if err != nil {
		return err
	}
	buf := appendFrame(make([]byte, 0, 2*hdrLen+len(b)), tReq, 0, ch.id, b)
	return ch.c.writeRaw(appendFrame(buf, tEOF, 0, ch.id, nil))
}

// Reply waits for the next reply packet.
func (ch *Chan) Reply(ctx context.Context) (*initproto.Packet, error) { return ch.replies.pop(ctx) }

// Call sends p and waits for the first reply.
func (ch *Chan) Call(ctx context.Context, p *initproto.Packet) (*initproto.Packet, error) {
	if err := ch.Send(p); err != nil {
		return nil, err
	}
	return ch.Reply(ctx)
}

// Write sends data on the channel (stdin, a connection's bytes, a file).
func (ch *Chan) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		k := min(len(b), chunk)
		if err := ch.c.write(tData, 0, ch.id, b[:k]); err != nil {
			return n, err
		}
		n += k
		b = b[k:]
	}
	return n, nil
}

// CloseWrite ends the data sent to the guest (EOF on stdin).
func (ch *Chan) CloseWrite() error { return ch.c.write(tEOF, 0, ch.id, nil) }

// Stream returns the guest's output stream s (1 stdout, 2 stderr).
func (ch *Chan) Stream(s int) io.Reader { return ch.streams[s-1] }

// Close forgets the channel on both sides; a process on it keeps running.
func (ch *Chan) Close() error {
	var err error
	ch.once.Do(func() {
		ch.c.mu.Lock()
		delete(ch.c.ch, ch.id)
		ch.c.mu.Unlock()
		ch.fail(io.EOF)
		err = ch.c.write(tClose, 0, ch.id, nil)
	})
	return err
}

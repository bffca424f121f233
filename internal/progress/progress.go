// Package progress draws progress bars for long CLI work (batch creates, layer
// builds, benchmarks) on a terminal and stays silent when its output is not one
// (a pipe, a file, CI logs): scripts see only the command's real output.
//
// A nil *Bar is a silent bar, so library code can take one from a context
// (Start) and call it unconditionally.
package progress

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// redrawEvery throttles redraws.
const redrawEvery = 100 * time.Millisecond

// Bar is one progress line.
type Bar struct {
	w     io.Writer
	label string
	bytes bool // count bytes (sizes and rates in KiB/MiB...)
	width func() int
	now   func() time.Time

	mu       sync.Mutex
	total    int64 // 0: unknown
	done     int64
	failed   int64
	start    time.Time
	lastDraw time.Time
	finished bool
}

// IsTerminal reports whether w is a terminal (an *os.File on a tty).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// New returns a bar counting items toward total (0: unknown) drawn on w, or a
// silent nil bar when w is not a terminal.
func New(w io.Writer, label string, total int64) *Bar {
	if !IsTerminal(w) {
		return nil
	}
	return newBar(w, label, total, false, termWidth(w))
}

// NewBytes is New for a byte count.
func NewBytes(w io.Writer, label string, total int64) *Bar {
	if !IsTerminal(w) {
		return nil
	}
	return newBar(w, label, total, true, termWidth(w))
}

func newBar(w io.Writer, label string, total int64, bytes bool, width func() int) *Bar {
	b := &Bar{w: w, label: label, total: total, bytes: bytes, width: width, now: time.Now}
	b.start = b.now()
	return b
}

func termWidth(w io.Writer) func() int {
	return func() int {
		if f, ok := w.(*os.File); ok {
			if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 20 {
				return cols
			}
		}
		return 80
	}
}

// Add counts n more done.
func (b *Bar) Add(n int64) { b.update(func() { b.done += n }) }

// Set sets the done count.
func (b *Bar) Set(n int64) { b.update(func() { b.done = n }) }

// Fail counts n done items that failed (shown on the line).
func (b *Bar) Fail(n int64) { b.update(func() { b.done += n; b.failed += n }) }

// SetTotal changes the total (0: unknown).
func (b *Bar) SetTotal(n int64) { b.update(func() { b.total = n }) }

// SetLabel changes the label drawn before the bar.
func (b *Bar) SetLabel(label string) { b.update(func() { b.label = label }) }

// Finish draws the final line and ends it; later calls do nothing.
func (b *Bar) Finish() {
	b.live(func() {
		b.finished = true
		b.drawLocked()
		fmt.Fprint(b.w, "\n")
	}, nil)
}

// live runs f under the lock while the bar is drawn, else orElse (if any).
func (b *Bar) live(f, orElse func()) {
	if b == nil {
		if orElse != nil {
			orElse()
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.finished {
		if orElse != nil {
			orElse()
		}
		return
	}
	f()
}

// Above runs print (which writes lines to the same terminal) with the bar's
// line cleared first and drawn again after it, so output and bar do not mix.
func (b *Bar) Above(print func()) {
	b.live(func() {
		fmt.Fprint(b.w, "\r\x1b[K")
		print()
		b.drawLocked()
	}, print)
}

func (b *Bar) update(f func()) {
	b.live(func() {
		f()
		if now := b.now(); now.Sub(b.lastDraw) >= redrawEvery || (b.total > 0 && b.done >= b.total) {
			b.drawLocked()
		}
	}, nil)
}

func (b *Bar) drawLocked() {
	b.lastDraw = b.now()
	fmt.Fprint(b.w, "\r\x1b[K"+b.lineLocked())
}

// lineLocked renders "label [####----] 42/100 42% 8.1/s eta 7s, 2 failed",
// fitted to the terminal's width.
func (b *Bar) lineLocked() string {
	elapsed := b.now().Sub(b.start).Seconds()
	rate := 0.0
	if elapsed > 0 {
		rate = float64(b.done) / elapsed
	}
	var stats []string
	if b.total > 0 {
		stats = append(stats, b.amount(b.done)+"/"+b.amount(b.total), fmt.Sprintf("%d%%", min(100, b.done*100/b.total)))
	} else {
		stats = append(stats, b.amount(b.done))
	}
	stats = append(stats, b.rate(rate))
	if b.total > 0 && rate > 0 && b.done < b.total {
		stats = append(stats, "eta "+(time.Duration(float64(b.total-b.done)/rate)*time.Second).Round(time.Second).String())
	} else {
		stats = append(stats, (time.Duration(elapsed * 1e9)).Round(100*time.Millisecond).String())
	}
	if b.failed > 0 {
		stats = append(stats, fmt.Sprintf("%d failed", b.failed))
	}
	tail := strings.Join(stats, "  ")
	width := b.width() - 1
	line := b.label + " " + tail
	if b.total > 0 {
		if room := width - len(b.label) - len(tail) - 4; room >= 10 {
			fill := int(int64(room) * min(b.done, b.total) / b.total)
			line = b.label + " [" + strings.Repeat("#", fill) + strings.Repeat("-", room-fill) + "] " + tail
		}
	}
	if len(line) > width {
		line = line[:width]
	}
	return line
}

func (b *Bar) amount(n int64) string {
	if !b.bytes {
		return fmt.Sprint(n)
	}
	return Bytes(n)
}

func (b *Bar) rate(r float64) string {
	if !b.bytes {
		return fmt.Sprintf("%.1f/s", r)
	}
	return Bytes(int64(r)) + "/s"
}

// Bytes formats n in B, KiB, MiB, GiB or TiB.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), 0
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %s", v, [...]string{"B", "KiB", "MiB", "GiB", "TiB"}[i])
}

type ctxKey struct{}

// WithOutput returns ctx carrying w as where Start draws bars (commands set
// it; library loops call Start).
func WithOutput(ctx context.Context, w io.Writer) context.Context {
	return context.WithValue(ctx, ctxKey{}, w)
}

// Start returns a bar on ctx's output (WithOutput), or a silent nil bar when
// ctx has none or it is not a terminal.
func Start(ctx context.Context, label string, total int64) *Bar {
	w, _ := ctx.Value(ctxKey{}).(io.Writer)
	if w == nil {
		return nil
	}
	return New(w, label, total)
}

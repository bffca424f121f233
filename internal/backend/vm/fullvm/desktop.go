package fullvm

import (
	"context"
	"fmt"
	"image"
	"time"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Colours and places of the desktop image's session
// (scripts/fullvm-image.sh /etc/X11/dsec-session): a #2f4f6f background, a
// white xterm, XFCE's panel along the top edge (30 pixels high).
const (
	bgColour    = 0x2f4f6f
	panelHeight = 24 // the rows of the panel checked (of its 30)
)

// DesktopShown reports whether img shows the desktop as the desktop image
// draws it: the session's background colour over at least a tenth of the
// screen, the xterm's white over at least a tenth, and the panel along the
// top: its strip drawn over the background (at most 5% background colour)
// with icons and text (at least 6 colours). A text console, a blank display
// or an X screen whose panel is not drawn yet fails. The fullvm backend's
// Start waits for it; benchmarks and tests use it.
func DesktopShown(img image.Image) (bool, string) {
	b := img.Bounds()
	var bg, white, total, panel, panelBG int
	colours := map[uint32]bool{}
	panelColours := map[uint32]bool{}
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			c := (r>>8)<<16 | (g>>8)<<8 | bl>>8
			total++
			colours[c] = true
			switch c {
			case bgColour:
				bg++
			case 0xffffff:
				white++
			}
			if y-b.Min.Y < panelHeight {
				panel++
				panelColours[c] = true
				if c == bgColour {
					panelBG++
				}
			}
		}
	}
	if total == 0 || panel == 0 {
		return false, "empty image"
	}
	why := fmt.Sprintf("background %d%%, white %d%%, %d colours; panel strip: background %d%%, %d colours",
		bg*100/total, white*100/total, len(colours), panelBG*100/panel, len(panelColours))
	desktop := bg*10 >= total && white*10 >= total && len(colours) >= 3
	drawnPanel := panelBG*20 <= panel && len(panelColours) >= 6
	return desktop && drawnPanel, why
}

// desktopPoll is how often awaitDesktop takes a screenshot.
const desktopPoll = 500 * time.Millisecond

// awaitDesktop takes screenshots until one shows the desktop
// (DesktopShown), for at most within: deadline_exceeded naming what the
// last screenshot showed, sandbox_gone if the VM ends meanwhile.
func (in *instance) awaitDesktop(ctx context.Context, within time.Duration) error {
	t0 := time.Now()
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	why := "no screenshot taken"
	for {
		img, err := in.screen(wctx)
		switch {
		case err == nil:
			ok, w := DesktopShown(img)
			if ok {
				return nil
			}
			why = "the last screenshot shows " + w
		case wctx.Err() == nil:
			why = "screenshot: " + err.Error()
		}
		select {
		case <-in.Done():
			return errdefs.New(api.CodeSandboxGone, "fullvm: the VM ended while its desktop was drawn (%s)", why)
		case <-wctx.Done():
			if ctx.Err() != nil {
				return errdefs.Wrap(api.CodeDeadlineExceeded, ctx.Err(), "fullvm: create ended after %v, before the desktop was drawn (%s)", time.Since(t0).Round(time.Second), why)
			}
			return errdefs.New(api.CodeDeadlineExceeded, "fullvm: the desktop was not drawn within %v after the guest agent answered (%s)", within, why)
		case <-time.After(desktopPoll):
		}
	}
}

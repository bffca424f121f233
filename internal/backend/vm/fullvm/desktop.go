package fullvm

import (
	"fmt"
	"image"
)

// DesktopShown reports whether img shows the desktop: the session's
// background colour (#2f4f6f) over at least a tenth of the screen and the
// xterm's white over at least a tenth (a text console or a blank display
// has neither). The desktop image's session
// (scripts/fullvm-image.sh) sets these colours; benchmarks and tests use it.
func DesktopShown(img image.Image) (bool, string) {
	b := img.Bounds()
	var bg, white, total int
	colours := map[uint32]bool{}
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			r, g, bl = r>>8, g>>8, bl>>8
			total++
			colours[r<<16|g<<8|bl] = true
			switch {
			case r == 0x2f && g == 0x4f && bl == 0x6f:
				bg++
			case r == 0xff && g == 0xff && bl == 0xff:
				white++
			}
		}
	}
	if total == 0 {
		return false, "empty image"
	}
	why := fmt.Sprintf("background %d%%, white %d%%, %d colours", bg*100/total, white*100/total, len(colours))
	return bg*10 >= total && white*10 >= total && len(colours) >= 3, why
}

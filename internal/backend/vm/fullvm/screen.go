package fullvm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/dsec-dev/dsec/internal/backend/vm/qmp"
	"github.com/dsec-dev/dsec/internal/errdefs"
)

// maxSide bounds a PPM's width and height (16 MiB of VGA memory holds at
// most 2560x1600 at 32 bits per pixel).
const maxSide = 4096

// Screenshot implements driver.Screenshotter: QMP screendump writes the
// display as a PPM into the VM's directory, which becomes a PNG.
func (in *instance) Screenshot(ctx context.Context) ([]byte, error) {
	img, err := in.screen(ctx)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&buf, img); err != nil {
		return nil, errdefs.Internal(err, "fullvm: png")
	}
	return buf.Bytes(), nil
}

// screen dumps the display (QMP screendump) and decodes it.
func (in *instance) screen(ctx context.Context) (*image.RGBA, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	var st struct {
		Dir string `json:"dir"`
	}
	if err := json.Unmarshal(in.State(), &st); err != nil || st.Dir == "" {
		return nil, errdefs.Internal(err, "fullvm: no VM directory in the state")
	}
	p := filepath.Join(st.Dir, "screen.ppm")
	defer os.Remove(p)
	err := in.QMP(ctx, func(q *qmp.Conn) error {
		_, err := q.Execute(ctx, "screendump", map[string]any{"filename": in.QEMUPath(p)})
		return err
	})
	if err != nil {
		return nil, in.qmpErr(err, "screendump")
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, errdefs.Internal(err, "fullvm: screendump output")
	}
	defer f.Close()
	img, err := decodePPM(bufio.NewReader(f))
	if err != nil {
		return nil, errdefs.Internal(err, "fullvm: screendump output")
	}
	in.w, in.h = img.Rect.Dx(), img.Rect.Dy()
	return img, nil
}

// decodePPM reads a binary PPM (P6, maxval 255), what QEMU's screendump
// writes.
func decodePPM(r *bufio.Reader) (*image.RGBA, error) {
	var magic string
	var hdr [3]int
	tok := func() (string, error) {
		var b []byte
		for {
			c, err := r.ReadByte()
			if err != nil {
				return "", fmt.Errorf("ppm header: %w", err)
			}
			switch {
			case c == '#' && len(b) == 0:
				if _, err := r.ReadString('\n'); err != nil {
					return "", fmt.Errorf("ppm header: %w", err)
				}
			case c == ' ' || c == '\t' || c == '\n' || c == '\r':
				if len(b) > 0 {
					return string(b), nil
				}
			default:
				if len(b) > 16 {
					return "", fmt.Errorf("ppm header: token too long")
				}
				b = append(b, c)
			}
		}
	}
	var err error
	if magic, err = tok(); err != nil {
		return nil, err
	}
	if magic != "P6" {
		return nil, fmt.Errorf("ppm: magic %q, want P6", magic)
	}
	for i := range hdr {
		s, err := tok()
		if err != nil {
			return nil, err
		}
		if hdr[i], err = strconv.Atoi(s); err != nil || hdr[i] <= 0 {
			return nil, fmt.Errorf("ppm: bad header field %q", s)
		}
	}
	w, h, maxv := hdr[0], hdr[1], hdr[2]
	if w > maxSide || h > maxSide || maxv != 255 {
		return nil, fmt.Errorf("ppm: unsupported %dx%d maxval %d", w, h, maxv)
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	row := make([]byte, 3*w)
	for y := 0; y < h; y++ {
		if _, err := io.ReadFull(r, row); err != nil {
			return nil, fmt.Errorf("ppm: pixels: %w", err)
		}
		o := img.PixOffset(0, y)
		for x := 0; x < w; x++ {
			img.Pix[o+4*x], img.Pix[o+4*x+1], img.Pix[o+4*x+2], img.Pix[o+4*x+3] = row[3*x], row[3*x+1], row[3*x+2], 0xff
		}
	}
	return img, nil
}

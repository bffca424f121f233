package fullvm

import (
	"bufio"
	"bytes"
	"testing"
)

func TestDecodePPM(t *testing.T) {
	img, err := decodePPM(bufio.NewReader(bytes.NewReader([]byte("P6\n# qemu\n2 1\n255\n\x01\x02\x03\x04\x05\x06"))))
	if err != nil {
		t.Fatal(err)
	}
	if r, g, b, _ := img.At(1, 0).RGBA(); r>>8 != 4 || g>>8 != 5 || b>>8 != 6 || img.Rect.Dx() != 2 {
		t.Errorf("pixel (1,0) = %d,%d,%d of a %v image", r>>8, g>>8, b>>8, img.Rect)
	}
	for _, bad := range []string{"", "P5\n1 1\n255\n\x00", "P6\n1 1\n65535\n", "P6\n4097 1\n255\n", "P6\n2 2\n255\n\x00"} {
		if _, err := decodePPM(bufio.NewReader(bytes.NewReader([]byte(bad)))); err == nil {
			t.Errorf("decodePPM(%q) succeeded", bad)
		}
	}
}

// FuzzDecodePPM: no input makes the decoder panic or allocate past its bound.
func FuzzDecodePPM(f *testing.F) {
	f.Add([]byte("P6\n2 1\n255\n\x01\x02\x03\x04\x05\x06"))
	f.Add([]byte("P6 1 1 255 abc"))
	f.Fuzz(func(t *testing.T, b []byte) {
		img, err := decodePPM(bufio.NewReader(bytes.NewReader(b)))
		if err == nil && (img.Rect.Dx() > maxSide || img.Rect.Dy() > maxSide) {
			t.Fatalf("accepted %v", img.Rect)
		}
	})
}

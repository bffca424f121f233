package fullvm

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/dsec-dev/dsec/internal/backend/vm/qmp"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// keyGap paces key strokes: QEMU's PS/2 keyboard queue is short, and a TCG
// guest drains it slowly; strokes sent at once are dropped.
const keyGap = 15 * time.Millisecond

// MaxText bounds one text input.
const MaxText = 4096

// absMax is QEMU's absolute pointer range (INPUT_EVENT_ABS_MAX).
const absMax = 0x7fff

// qcodes are the QEMU key codes (QKeyCode) accepted by name.
var qcodes = func() map[string]bool {
	m := map[string]bool{}
	for _, k := range strings.Fields(`shift shift_r alt alt_r ctrl ctrl_r meta_l meta_r menu esc
		minus equal backspace tab bracket_left bracket_right ret semicolon apostrophe grave_accent
		backslash comma dot slash asterisk spc caps_lock num_lock scroll_lock print sysrq pause
		home end pgup pgdn up down left right insert delete kp_0 kp_1 kp_2 kp_3 kp_4 kp_5 kp_6
		kp_7 kp_8 kp_9 kp_add kp_subtract kp_multiply kp_divide kp_enter kp_decimal less`) {
		m[k] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		m[string(c)] = true
	}
	for c := '0'; c <= '9'; c++ {
		m[string(c)] = true
	}
	for i := 1; i <= 12; i++ {
		m["f"+strconv.Itoa(i)] = true
	}
	return m
}()

// keyAliases are friendlier names for qcodes.
var keyAliases = map[string]string{
	"enter": "ret", "return": "ret", "escape": "esc", "space": "spc", "del": "delete",
	"control": "ctrl", "super": "meta_l", "win": "meta_l", "pageup": "pgup", "pagedown": "pgdn",
	"bs": "backspace",
}

// charKeys maps a printable US-layout character to its qcode and whether it
// needs shift.
var charKeys = func() map[rune]stroke {
	m := map[rune]stroke{' ': {"spc", false}, '\n': {"ret", false}, '\t': {"tab", false}}
	for c := 'a'; c <= 'z'; c++ {
		m[c] = stroke{string(c), false}
		m[c-'a'+'A'] = stroke{string(c), true}
	}
	for c := '0'; c <= '9'; c++ {
		m[c] = stroke{string(c), false}
	}
	plain := map[rune]string{'-': "minus", '=': "equal", '[': "bracket_left", ']': "bracket_right",
		'\\': "backslash", ';': "semicolon", '\'': "apostrophe", '`': "grave_accent", ',': "comma",
		'.': "dot", '/': "slash"}
	for c, k := range plain {
		m[c] = stroke{k, false}
	}
	shifted := map[rune]string{'!': "1", '@': "2", '#': "3", '$': "4", '%': "5", '^': "6", '&': "7",
		'*': "8", '(': "9", ')': "0", '_': "minus", '+': "equal", '{': "bracket_left",
		'}': "bracket_right", '|': "backslash", ':': "semicolon", '"': "apostrophe", '~': "grave_accent",
		'<': "comma", '>': "dot", '?': "slash"}
	for c, k := range shifted {
		m[c] = stroke{k, true}
	}
	return m
}()

type stroke struct {
	key   string
	shift bool
}

// chord parses a key name or chord ("ctrl-alt-delete", "Return", "a") into
// qcodes, modifiers first.
func chord(name string) ([]string, error) {
	if name == "" || len(name) > 64 {
		return nil, errdefs.Invalid("input: key must be a key name or chord of at most 64 bytes")
	}
	var keys []string
	for _, part := range strings.Split(strings.ToLower(name), "-") {
		if a, ok := keyAliases[part]; ok {
			part = a
		}
		if !qcodes[part] {
			return nil, errdefs.Invalid("input: unknown key %q in %q (QEMU key names: a, ret, esc, ctrl, alt, shift, f1, up, ...)", part, name)
		}
		keys = append(keys, part)
	}
	return keys, nil
}

// keyEvents presses keys in order and releases them in reverse.
func keyEvents(keys []string) []map[string]any {
	ev := make([]map[string]any, 0, 2*len(keys))
	key := func(k string, down bool) map[string]any {
		return map[string]any{"type": "key", "data": map[string]any{"down": down,
			"key": map[string]any{"type": "qcode", "data": k}}}
	}
	for _, k := range keys {
		ev = append(ev, key(k, true))
	}
	for i := len(keys) - 1; i >= 0; i-- {
		ev = append(ev, key(keys[i], false))
	}
	return ev
}

// textStrokes turns text into key chords; every character must be typeable
// on a US keyboard (checked before anything is sent).
func textStrokes(text string) ([][]string, error) {
	if len(text) > MaxText {
		return nil, errdefs.Invalid("input: text is %d bytes, at most %d", len(text), MaxText)
	}
	var out [][]string
	for i, c := range text {
		s, ok := charKeys[c]
		if !ok {
			return nil, errdefs.Invalid("input: character %q at byte %d cannot be typed (US keyboard, printable ASCII, \\n, \\t)", c, i)
		}
		if s.shift {
			out = append(out, []string{"shift", s.key})
		} else {
			out = append(out, []string{s.key})
		}
	}
	return out, nil
}

// SendInput implements driver.Input.
func (in *instance) SendInput(ctx context.Context, req api.InputRequest) (api.InputResult, error) {
	var batches [][]map[string]any
	switch {
	case req.Text != "":
		strokes, err := textStrokes(req.Text)
		if err != nil {
			return api.InputResult{}, err
		}
		for _, s := range strokes {
			batches = append(batches, keyEvents(s))
		}
	case req.Key != "":
		keys, err := chord(req.Key)
		if err != nil {
			return api.InputResult{}, err
		}
		batches = append(batches, keyEvents(keys))
	case req.Click != nil:
		ev, err := in.clickEvents(ctx, *req.Click)
		if err != nil {
			return api.InputResult{}, err
		}
		batches = append(batches, ev[:2], ev[2:3], ev[3:])
	default:
		return api.InputResult{}, errdefs.Invalid(`input needs one of "text", "key" or "click"`)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	n := 0
	for i, b := range batches {
		if i > 0 {
			select {
			case <-ctx.Done():
				return api.InputResult{Events: n}, errdefs.Wrap(api.CodeDeadlineExceeded, ctx.Err(), "input: %d of %d events sent", n, n+len(b))
			case <-time.After(keyGap):
			}
		}
		err := in.QMP(ctx, func(q *qmp.Conn) error {
			_, err := q.Execute(ctx, "input-send-event", map[string]any{"events": b})
			return err
		})
		if err != nil {
			return api.InputResult{Events: n}, in.qmpErr(err, "input-send-event")
		}
		n += len(b)
	}
	return api.InputResult{Events: n}, nil
}

// clickEvents moves the tablet to X,Y (display pixels) and presses and
// releases the button: [x, y, down, up]. The display size comes from the
// last screenshot (one is taken if there was none).
func (in *instance) clickEvents(ctx context.Context, c api.Click) ([]map[string]any, error) {
	btn := c.Button
	if btn == "" {
		btn = "left"
	}
	if btn != "left" && btn != "right" && btn != "middle" {
		return nil, errdefs.Invalid("input: click button %q: want left, right or middle", c.Button)
	}
	in.mu.Lock()
	w, h := in.w, in.h
	in.mu.Unlock()
	if w == 0 {
		if _, err := in.Screenshot(ctx); err != nil {
			return nil, err
		}
		in.mu.Lock()
		w, h = in.w, in.h
		in.mu.Unlock()
	}
	if c.X < 0 || c.Y < 0 || c.X >= w || c.Y >= h {
		return nil, errdefs.Invalid("input: click at %d,%d is outside the %dx%d display", c.X, c.Y, w, h)
	}
	abs := func(axis string, v, size int) map[string]any {
		scaled := 0
		if size > 1 {
			scaled = v * absMax / (size - 1)
		}
		return map[string]any{"type": "abs", "data": map[string]any{"axis": axis, "value": scaled}}
	}
	b := func(down bool) map[string]any {
		return map[string]any{"type": "btn", "data": map[string]any{"down": down, "button": btn}}
	}
	return []map[string]any{abs("x", c.X, w), abs("y", c.Y, h), b(true), b(false)}, nil
}

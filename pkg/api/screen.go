package api

// InputRequest is the body of POST /v1/sandboxes/{id}/input: exactly one of
// Text (typed as key presses; "\n" is Return, "\t" Tab), Key (one key or a
// chord by name: "ret", "esc", "ctrl-c", "alt-f4", "a", "f1") or Click (a
// mouse click at display pixel X,Y).
type InputRequest struct {
	Text  string `json:"text,omitempty"`
	Key   string `json:"key,omitempty"`
	Click *Click `json:"click,omitempty"`
}

// Click is a mouse click at display coordinates (pixels from the top left).
type Click struct {
	X int `json:"x"`
	Y int `json:"y"`
	// Button is "left" (default), "right" or "middle".
	Button string `json:"button,omitempty"`
}

// InputResult says what was sent.
type InputResult struct {
	Events int `json:"events"` // input events sent to the display
}

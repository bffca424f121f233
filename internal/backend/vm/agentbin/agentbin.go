// Package agentbin embeds dsec-vmagent, the static C program (csrc/vmagent)
// that is PID 1 of every microVM: built by build.sh (make init) before the Go
// build, like internal/backend/initbin's container init.
package agentbin

import _ "embed"

//go:embed dsec-vmagent
var binary []byte

// Binary returns the agent executable.
func Binary() []byte { return binary }

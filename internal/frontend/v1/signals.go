package v1

import (
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dsec-dev/dsec/internal/errdefs"
)

// maxSignal is the highest Linux signal number (SIGRTMAX).
const maxSignal = 64

// signalAliases are the Linux names unix.SignalNum does not know.
var signalAliases = map[string]unix.Signal{"SIGIOT": unix.SIGABRT, "SIGPOLL": unix.SIGIO}

// parseSignal accepts "SIGTERM", "TERM", "sigterm" or "15"; empty means def.
func parseSignal(name string, def int) (int, error) {
	if name == "" {
		return def, nil
	}
	if n, err := strconv.Atoi(name); err == nil {
		if n < 1 || n > maxSignal {
			return 0, errdefs.Invalid("signal number %d out of range 1..%d", n, maxSignal)
		}
		return n, nil
	}
	full := "SIG" + strings.TrimPrefix(strings.ToUpper(name), "SIG")
	if sig := unix.SignalNum(full); sig != 0 {
		return int(sig), nil
	}
	if sig, ok := signalAliases[full]; ok {
		return int(sig), nil
	}
	return 0, errdefs.Invalid("unknown signal %q", name)
}

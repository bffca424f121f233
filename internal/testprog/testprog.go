// Package testprog holds the small programs dsec's conformance suites
// (drivertest, sessiontest) run inside sandboxes, so every suite runs the same
// ones. It has no dependencies: any layer's suite may use it.
package testprog

import "fmt"

// Listener returns a shell script and the environment it needs: it accepts one
// TCP connection on 127.0.0.1:port, sends "hello\n" and exits. It uses python3
// when the image has it, else busybox nc.
func Listener(port int) (script string, env map[string]string) {
	py := fmt.Sprintf(`import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", %d))
s.listen(1)
c, _ = s.accept()
c.sendall(b"hello\n")
c.close()
`, port)
	script = fmt.Sprintf(`if command -v python3 >/dev/null 2>&1; then exec python3 -c "$PY"; else echo hello | nc -l -p %d; fi`, port)
	return script, map[string]string{"PY": py}
}

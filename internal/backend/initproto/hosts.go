package initproto

// HostsFile is the /etc/hosts the init writes for hostname when the image has
// none (csrc/init: write_hosts). A snapshot of a writable layer leaves this
// file out, so that a fork child's or a committed environment's init writes
// one with its own hostname.
func HostsFile(hostname string) string {
	return "127.0.0.1\tlocalhost " + hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n"
}

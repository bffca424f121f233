// Package seccomp builds the default seccomp profile for sandbox containers
// and compiles it to a classic BPF program in pure Go (no cgo, no
// libseccomp).
//
// The profile is a denylist for x86_64: other architectures are killed, the
// x32 ABI is refused, and the syscalls Docker's default profile withholds
// from a container holding the OCI default capabilities (no CAP_SYS_ADMIN)
// fail with EPERM; everything else is allowed. Compile turns a Profile into
// []unix.SockFilter, Encode into the raw bytes a C init hands to
// prctl(PR_SET_SECCOMP), MemFD into a sealed memfd to pass to many children,
// and Install applies it to the calling Go process.
package seccomp

// Package seccomp builds the default seccomp profile for sandbox containers
// and compiles it to a classic BPF program in pure Go (no cgo, no
// libseccomp).
//
// The profile is an allow list for x86_64 equivalent to Docker's default
// profile for a container holding the OCI default capabilities (no
// CAP_SYS_ADMIN): other architectures are killed, the x32 ABI is refused,
// the syscalls Docker allows are allowed (with its conditions on clone,
// personality and socket), clone3 fails with ENOSYS, and everything else,
// including syscalls newer kernels add, fails with EPERM. dsec refuses a
// few calls more than Docker (see Default); docker_test.go compares the
// two. Compile turns a Profile into []unix.SockFilter, Encode into the raw
// bytes a C init hands to prctl(PR_SET_SECCOMP), MemFD into a sealed memfd
// to pass to many children, and Install applies it to the calling Go
// process.
package seccomp

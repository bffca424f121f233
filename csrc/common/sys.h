/*
 * sys.h: system-call helpers shared by dsec's three C programs, the container
 * init (csrc/init), the microVM guest agent (csrc/vmagent) and the FnCall
 * zygote (csrc/fncall). Header-only (static functions): each program stays
 * one translation unit built by csrc/build.sh.
 *
 * exec_path runs in children that share their parent's memory (a vfork
 * child, the zygote's CLONE_VM helper): it uses raw system calls and
 * touches no libc state (no stdio, no malloc, no locale).
 */
#ifndef DSEC_COMMON_SYS_H
#define DSEC_COMMON_SYS_H

#include <errno.h>
#include <net/if.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include "wire.h"

/* DEFAULT_PATH is the search path of a program started without PATH in its
 * environment. */
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* exec_path runs execve, searching the PATH of envp (DEFAULT_PATH without
 * one; never the caller's environ) when file has no '/'. It returns only on
 * failure, with the error execvp would report: EACCES if some candidate was
 * not executable and none was found, ENOENT if none existed, else the first
 * error that ends the search (ENOEXEC, E2BIG, ETXTBSY, ...). */
static inline int exec_path(char **argv, char **envp)
{
	const char *file = argv[0], *path = DEFAULT_PATH;
	char buf[4096];
	int eacces = 0;
	size_t fl = strlen(file);

	if (!fl)
		return ENOENT;
	if (strchr(file, '/')) {
		syscall(SYS_execve, file, argv, envp);
		return errno;
	}
	for (char **e = envp; *e; e++)
		if (!strncmp(*e, "PATH=", 5)) {
			path = *e + 5;
			break;
		}
	for (const char *p = path;; p++) {
		const char *end = strchrnul(p, ':');
		size_t l = (size_t)(end - p);
		if (l + 1 + fl + 1 <= sizeof buf) {
			/* an empty entry is the current directory */
			memcpy(buf, p, l);
			if (l)
				buf[l++] = '/';
			memcpy(buf + l, file, fl + 1);
			syscall(SYS_execve, buf, argv, envp);
			switch (errno) {
			case EACCES:
				eacces = 1;
				/* fallthrough */
			case ENOENT:
			case ENOTDIR:
			case ESTALE:
			case ELOOP:
			case ENAMETOOLONG:
				break;
			default:
				return errno;
			}
		}
		if (!*end)
			break;
		p = end;
	}
	return eacces ? EACCES : ENOENT;
}

/* read_bpf reads a seccomp program (a raw struct sock_filter array, at most
 * BPF_MAXINSNS_ instructions) from fd with pread into buf, which holds
 * BPF_MAXINSNS_ entries, and returns its length in instructions (0: the file
 * is empty), or -errno. The caller installs it (and decides what an empty
 * program means). */
static inline int read_bpf(int fd, struct sock_filter *buf)
{
	struct stat st;
	if (fstat(fd, &st))
		return -errno;
	if (st.st_size % (off_t)sizeof *buf || st.st_size > BPF_MAXINSNS_ * (off_t)sizeof *buf)
		return -EINVAL;
	for (off_t off = 0; off < st.st_size;) {
		ssize_t n = pread(fd, (char *)buf + off, (size_t)(st.st_size - off), off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		off += n;
	}
	return (int)(st.st_size / (off_t)sizeof *buf);
}

/* loopback_up brings up the loopback interface of the caller's network
 * namespace. It returns NULL, or the step that failed with errno set: every
 * caller treats that as a failed setup (a sandbox without a working lo is
 * not started). */
static inline const char *loopback_up(void)
{
	struct ifreq ifr;
	const char *step = NULL;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return "socket for lo";
	memset(&ifr, 0, sizeof ifr);
	memcpy(ifr.ifr_name, "lo", 3);
	if (ioctl(s, SIOCGIFFLAGS, &ifr))
		step = "get lo flags";
	else {
		ifr.ifr_flags |= IFF_UP;
		if (ioctl(s, SIOCSIFFLAGS, &ifr))
			step = "bring lo up";
	}
	int e = errno;
	close(s);
	errno = e;
	return step;
}

#endif /* DSEC_COMMON_SYS_H */

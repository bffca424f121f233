/*
 * dsec-init: PID 1 of a dsec container sandbox.
 *
 * The Go side (internal/backend/initproto) clones this binary into fresh mount, PID,
 * UTS, IPC and network namespaces with this fd layout:
 *
 *   0 /dev/null   1,2 log file (diagnostics go to stderr)
 *   3 config      "key=value\n" lines, read until EOF
 *   4 sync pipe   one byte means "cgroups are set up, go ahead"
 *   5 status pipe we write "OK\n" or "ERR <step>: <strerror>\n"
 *   6 control     listening SOCK_SEQPACKET socket
 *   7 seccomp     optional raw struct sock_filter array (read with pread)
 *
 * The security policy arrives as data in the config (internal/backend/initproto
 * holds the defaults): the capability set to keep (caps=HEX), the device
 * nodes of /dev (dev=NAME c|b MAJOR MINOR), the masked and read-only paths
 * (mask=PATH, ro=PATH), net.ipv4.ping_group_range, nodev on the root,
 * setuid=1 (no no_new_privs: sudo works; see setup). Three
 * keys exist only for tests that weaken a sandbox on purpose (dumpable=1,
 * cgroupns=0, xino=0); the node never sets them.
 *
 * With userns=1 the init was cloned into a new user namespace too (the parent
 * wrote its uid/gid maps): fd 4 is then a unix socket whose sync byte
 * carries one idmapped mount fd per lower layer, /dev nodes are binds of the
 * host's (mknod is refused there) and proc is made before the pivot.
 *
 * After setup, fd 8 (FD_RW, close-on-exec) is an O_PATH handle on the root
 * of the writable-layer tmpfs (upper/, work/, dev/): the host reaches the
 * overlay upper through /proc/PID/fd/8 to snapshot it (fork, commit; see
 * internal/backend/container/snapshot.go). The sandbox cannot: init is not dumpable.
 *
 * Setup builds the root filesystem (tmpfs-backed overlay upper layer, proc,
 * dev, sys, OCI masked and read-only paths; /dev, /dev/shm and the masked
 * directories live in the writable-layer tmpfs and /sys is a clone of a
 * sysfs shared by all sandboxes, see struct trees; a random boot id of this
 * start covers /proc/sys/kernel/random/boot_id), pivots into it, drops
 * privileges to the OCI default capability set, installs the seccomp filter and then
 * serves the control protocol: every packet is a list of NUL-terminated
 * strings, the op first, then key=value fields. See internal/backend/initproto for the
 * client and the protocol description.
 *
 * The build needs no kernel headers (musl-gcc ships none), so the few kernel
 * ABI structures used are declared below. The protocol and child supervision
 * are shared with the microVM agent (csrc/common/proto.h, super.h), the
 * system-call helpers with the FnCall zygote too (csrc/common/sys.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/fds.h"
#include "../common/super.h"

/* ---- kernel ABI bits (musl ships no linux headers) ---- */

#define CAP_VERSION_3 0x20080522
#define MODE_FILTER 2 /* SECCOMP_MODE_FILTER */
struct cap_header { uint32_t version; int pid; };
struct cap_data { uint32_t effective, permitted, inheritable; };
WIRE_SIZE(struct cap_header, 8); /* capset(2)'s _LINUX_CAPABILITY_VERSION_3 */
WIRE_SIZE(struct cap_data, 12);

/* new mount API (Linux 5.2); same numbers on every architecture */
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#define OPEN_TREE_CLONE_ 1
#define AT_RECURSIVE_ 0x8000
#define MOVE_MOUNT_F_EMPTY_PATH_ 0x00000004
#define MOVE_MOUNT_T_SYMLINKS_ 0x00000010
#ifndef SYS_fsopen
#define SYS_fsopen 430
#endif
#ifndef SYS_fsconfig
#define SYS_fsconfig 431
#endif
#ifndef SYS_fsmount
#define SYS_fsmount 432
#endif
#define FSCONFIG_CMD_CREATE_ 6
#define MOUNT_ATTR_NOSUID_ 0x02
#define MOUNT_ATTR_NODEV_ 0x04
#define MOUNT_ATTR_NOEXEC_ 0x08
#define MAX_LOWER 128 /* idmapped lower layers accepted with the sync byte */
#define SYSFS_MAGIC_ 0x62656572
#define NSFS_MAGIC_ 0x6e736673

enum { FD_CONFIG = 3, FD_SYNC = 4, FD_STATUS = 5, FD_LISTEN = 6, FD_SECCOMP = 7, FD_RW = 8 };

#define MAX_PACKET (128 * 1024) /* largest request accepted */
#define MAX_RECORDS 4096        /* exit records kept for tagged processes */
#define MAX_QUEUE 256           /* queued replies before a client is dropped */
#define MAX_FDS 8               /* SCM_RIGHTS fds accepted per packet */

static void logf_(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n = snprintf(buf, sizeof buf, "dsec-init: ");
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof buf - n, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof buf - 2)
		n = sizeof buf - 2;
	buf[n++] = '\n';
	(void)!write(2, buf, n);
}

/* fail reports a setup error on the status pipe and exits. */
static void __attribute__((noreturn)) fail(const char *step, int err)
{
	char buf[512];
	int n = snprintf(buf, sizeof buf, "ERR %s: %s\n", step, strerror(err));
	if (n > (int)sizeof buf - 1)
		n = sizeof buf - 1;
	(void)!write(FD_STATUS, buf, n);
	(void)!write(2, buf, n);
	_exit(1);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p) {
		logf_("out of memory");
		_exit(1);
	}
	return p;
}

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p) {
		logf_("out of memory");
		_exit(1);
	}
	return p;
}


/* ======================= setup ======================= */

#ifndef PR_SET_MEMORY_MERGE
#define PR_SET_MEMORY_MERGE 67
#endif
struct devnode {
	char name[64];
	mode_t type; /* S_IFCHR or S_IFBLK */
	unsigned maj, min;
};

struct config {
	const char *hostname, *root, *rwdir;
	const char *sysfs;    /* shared read-only sysfs to clone; NULL: mount one */
	const char *sysfsnet; /* nsfs file of the network namespace it shows */
	unsigned long long rwsize;
	const char **lower;
	int nlower;
	int ksm; /* PR_SET_MEMORY_MERGE: KSM merges this init and its descendants */
	unsigned long long caps; /* capabilities kept (bit n = capability n) */
	int hascaps;
	const char **masked, **readonly; /* paths, like lower */
	int nmasked, nreadonly;
	struct devnode *devs;
	int ndevs;
	const char *pingrange; /* net.ipv4.ping_group_range, or NULL */
	int rootnodev;         /* mount the overlay root nodev */
	int dumpable;          /* test only: leave the init dumpable */
	int nocgroupns;        /* test only: no cgroup namespace */
	int noxino;            /* test only: overlay without xino */
	int userns;            /* in a user namespace: lowers arrive as idmapped mount fds */
	int setuid;            /* no no_new_privs: setuid programs (sudo) work, see setup */
	/* template=1: cloned from the spawner's template mount namespace
	 * (spawner.h), which holds no host file system: the lowers, the shared
	 * sysfs and its network namespace arrive as fds with the sync byte,
	 * root and rwdir are the template's empty directories, and the root
	 * switch needs no pivot_root (see switch_root) */
	int tmpl;
	int sysfsfd, netfd; /* template only: the shared sysfs clone and its netns */
	int lowerfds[MAX_LOWER];
};

/* parse_dev parses "NAME c|b MAJOR MINOR"; NAME is a plain file name. */
static int parse_dev(const char *v, struct devnode *d)
{
	char type;
	int n = 0;
	if (sscanf(v, "%63s %c %u %u%n", d->name, &type, &d->maj, &d->min, &n) != 4 || v[n])
		return -1;
	if (strchr(d->name, '/') || !strcmp(d->name, ".") || !strcmp(d->name, "..") ||
	    (type != 'c' && type != 'b'))
		return -1;
	d->type = type == 'c' ? S_IFCHR : S_IFBLK;
	return 0;
}

/* read_config reads fd 3 until EOF and splits it into key=value lines. */
static void read_config(struct config *c)
{
	size_t cap = 4096, len = 0;
	char *buf = xmalloc(cap);
	for (;;) {
		if (len + 1 >= cap) {
			if (cap >= (1 << 20))
				fail("read config", EFBIG);
			buf = xrealloc(buf, cap *= 2);
		}
		ssize_t n = read(FD_CONFIG, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			fail("read config", errno);
		if (n == 0)
			break;
		len += n;
	}
	buf[len] = 0;
	memset(c, 0, sizeof *c);
	c->lower = xmalloc(sizeof(char *) * (len / 8 + 1));
	c->masked = xmalloc(sizeof(char *) * (len / 6 + 1));
	c->readonly = xmalloc(sizeof(char *) * (len / 4 + 1));
	c->devs = xmalloc(sizeof(struct devnode) * (len / 10 + 1));
	for (char *line = buf, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		char *v = strchr(line, '=');
		if (!v)
			fail("config: line without '='", EINVAL);
		*v++ = 0;
		if (!strcmp(line, "hostname"))
			c->hostname = v;
		else if (!strcmp(line, "root"))
			c->root = v;
		else if (!strcmp(line, "rwdir"))
			c->rwdir = v;
		else if (!strcmp(line, "sysfs"))
			c->sysfs = v;
		else if (!strcmp(line, "sysfsnet"))
			c->sysfsnet = v;
		else if (!strcmp(line, "rwsize")) {
			if (parse_uint(v, ~0ULL, &c->rwsize))
				fail("config: bad rwsize", EINVAL);
		} else if (!strcmp(line, "lower"))
			c->lower[c->nlower++] = v;
		else if (!strcmp(line, "ksm"))
			c->ksm = !strcmp(v, "1");
		else if (!strcmp(line, "caps")) {
			char *end;
			errno = 0;
			c->caps = strtoull(v, &end, 16);
			if (errno || *end || !*v)
				fail("config: bad caps", EINVAL);
			c->hascaps = 1;
		} else if (!strcmp(line, "mask") && v[0] == '/')
			c->masked[c->nmasked++] = v;
		else if (!strcmp(line, "ro") && v[0] == '/')
			c->readonly[c->nreadonly++] = v;
		else if (!strcmp(line, "dev")) {
			if (parse_dev(v, &c->devs[c->ndevs++]))
				fail("config: bad dev", EINVAL);
		} else if (!strcmp(line, "pingrange"))
			c->pingrange = v;
		else if (!strcmp(line, "rootnodev"))
			c->rootnodev = !strcmp(v, "1");
		else if (!strcmp(line, "dumpable"))
			c->dumpable = !strcmp(v, "1");
		else if (!strcmp(line, "cgroupns"))
			c->nocgroupns = !strcmp(v, "0");
		else if (!strcmp(line, "xino"))
			c->noxino = !strcmp(v, "0");
		else if (!strcmp(line, "userns"))
			c->userns = !strcmp(v, "1");
		else if (!strcmp(line, "setuid"))
			c->setuid = !strcmp(v, "1");
		else if (!strcmp(line, "template"))
			c->tmpl = !strcmp(v, "1");
		else
			fail("config: unknown key", EINVAL);
	}
	if (!c->root || !c->rwdir || !c->nlower || !*c->root || !*c->rwdir || !c->hascaps)
		fail("config: root, rwdir, lower and caps are required", EINVAL);
	if (!c->hostname)
		c->hostname = "sandbox";
	if (c->userns && (c->nlower > MAX_LOWER || !c->sysfs))
		fail("config: a user namespace needs at most 128 lowers and the shared sysfs", EINVAL);
	if (c->tmpl && (c->userns || c->nlower > MAX_LOWER))
		fail("config: a template clone takes at most 128 lowers and no user namespace", EINVAL);
	c->sysfsfd = c->netfd = -1;
	if ((c->sysfs && c->sysfs[0] != '/') || (c->sysfsnet && c->sysfsnet[0] != '/') ||
	    (!c->sysfs != !c->sysfsnet))
		fail("config: sysfs and sysfsnet must be absolute paths, both or neither", EINVAL);
	/* overlay option syntax uses ',' and ':' as separators */
	for (int i = -1; i < c->nlower; i++) {
		const char *p = i < 0 ? c->rwdir : c->lower[i];
		if (strpbrk(p, ",:\\") || p[0] != '/')
			fail("config: layer paths must be absolute without ',' ':' '\\'", EINVAL);
	}
}

/* wait_sync blocks for the go-ahead byte; EOF means the parent gave up. In
 * a user namespace the sync fd is a unix socket and the byte carries one
 * idmapped mount fd per lower layer (made by the parent, which is
 * privileged over the layers' file systems; the init is not). */
static void wait_sync(struct config *c)
{
	char b;
	ssize_t n;
	if (!c->userns && !c->tmpl) {
		do
			n = read(FD_SYNC, &b, 1);
		while (n < 0 && errno == EINTR);
		if (n != 1)
			_exit(1);
		return;
	}
	union {
		char buf[CMSG_SPACE(sizeof(int) * (MAX_LOWER + 2))];
		struct cmsghdr align;
	} u;
	struct iovec iov = {&b, 1};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			   .msg_controllen = sizeof u.buf};
	do
		n = recvmsg(FD_SYNC, &m, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		_exit(1);
	int got = 0, extra = c->tmpl && c->sysfs ? 2 : 0;
	for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h)) {
		if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (int i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof fd);
			if (got < c->nlower)
				c->lowerfds[got] = fd;
			else if (got == c->nlower && extra)
				c->sysfsfd = fd;
			else if (got == c->nlower + 1 && extra)
				c->netfd = fd;
			got++;
		}
	}
	if (got != c->nlower + extra || (m.msg_flags & MSG_CTRUNC))
		fail("lower layers: fd count", EINVAL);
	/* mount_root takes FD_RW after the lowers are attached: the two fds
	 * that stay open must not sit on it */
	for (int *fd = &c->sysfsfd; fd <= &c->netfd; fd++) {
		if (*fd < 0 || *fd > FD_RW)
			continue;
		int hi = fcntl(*fd, F_DUPFD_CLOEXEC, FD_RW + 1);
		if (hi < 0)
			fail("move sysfs fd", errno);
		close(*fd);
		*fd = hi;
	}
}

static void mkdir_p(const char *path, mode_t mode)
{
	if (mkdir(path, mode) && errno != EEXIST)
		fail(path, errno);
}

static void xmount(const char *src, const char *dst, const char *type,
		   unsigned long flags, const char *data, const char *step)
{
	if (mount(src, dst, type, flags, data))
		fail(step, errno);
}

/* trees holds detached mounts (open_tree clones) taken from the host side
 * before pivot_root and attached after it, so that every mount target is
 * resolved inside the new root: a symlink in the image cannot redirect a
 * mount onto the host. Every sandbox superblock costs per-memcg shrinker
 * memory on the host, so /dev, /dev/shm and the masked directories live in
 * the writable-layer tmpfs and /sys is a clone of one sysfs shared by all
 * sandboxes of a driver: a sandbox makes four superblocks (overlay, tmpfs,
 * proc, devpts). */
struct trees {
	int proc;   /* user namespace only: a detached proc, see mount_root */
	int dev;    /* rwdir/dev: becomes /dev */
	int masked; /* rwdir/.masked: the empty directory over masked dirs */
	int bootid; /* rwdir/.boot_id: bound over /proc/sys/kernel/random/boot_id */
	int sys;    /* the shared sysfs, or -1: mount a sysfs of our own */
};

static void rw_path(char *buf, size_t n, const char *rwdir, const char *rel)
{
	if (snprintf(buf, n, "%s/%s", rwdir, rel) >= (int)n)
		fail("rwdir path", ENAMETOOLONG);
}

static int clone_tree(const char *path, int recursive, const char *step)
{
	int fd = syscall(SYS_open_tree, AT_FDCWD, path,
			 OPEN_TREE_CLONE_ | O_CLOEXEC | (recursive ? AT_RECURSIVE_ : 0));
	if (fd < 0)
		fail(step, errno);
	return fd;
}

/* attach_tree moves a detached mount onto dst and closes its fd. Like
 * mount(2), a symlink at dst is followed (inside the new root). */
static void attach_tree(int *fd, const char *dst, const char *step)
{
	if (syscall(SYS_move_mount, *fd, "", AT_FDCWD, dst,
		    MOVE_MOUNT_F_EMPTY_PATH_ | MOVE_MOUNT_T_SYMLINKS_))
		fail(step, errno);
	close(*fd);
	*fd = -1;
}

/* bind_host_dev binds the host's /dev/NAME onto dst (mknod is refused in a
 * user namespace). The host node must be the configured device; the device
 * cgroup still decides whether it opens. */
static void bind_host_dev(const struct devnode *d, const char *dst)
{
	char host[80];
	struct stat st;
	snprintf(host, sizeof host, "/dev/%s", d->name);
	if (stat(host, &st))
		fail(host, errno);
	if ((st.st_mode & S_IFMT) != d->type || st.st_rdev != makedev(d->maj, d->min))
		fail(host, ENODEV);
	int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
	if (fd < 0)
		fail(dst, errno);
	close(fd);
	xmount(host, dst, NULL, MS_BIND, NULL, host);
}

/* populate_dev creates the /dev tree in the writable-layer tmpfs. The paths
 * are on a tmpfs we just mounted, so no symlink can be in the way. */
static void populate_dev(const struct config *c)
{
	const char *rwdir = c->rwdir;
	static const char *links[][2] = {
		{"/proc/self/fd", "dev/fd"}, {"/proc/self/fd/0", "dev/stdin"},
		{"/proc/self/fd/1", "dev/stdout"}, {"/proc/self/fd/2", "dev/stderr"},
		{"pts/ptmx", "dev/ptmx"},
	};
	char p[4096];

	rw_path(p, sizeof p, rwdir, "dev");
	mkdir_p(p, 0755);
	rw_path(p, sizeof p, rwdir, "dev/pts");
	mkdir_p(p, 0755);
	rw_path(p, sizeof p, rwdir, "dev/shm");
	mkdir_p(p, 01777);
	for (int i = 0; i < c->ndevs; i++) {
		char rel[80];
		snprintf(rel, sizeof rel, "dev/%s", c->devs[i].name);
		rw_path(p, sizeof p, rwdir, rel);
		if (c->userns) {
			bind_host_dev(&c->devs[i], p);
			continue;
		}
		if (mknod(p, c->devs[i].type | 0666, makedev(c->devs[i].maj, c->devs[i].min)))
			fail(rel, errno);
	}
	for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
		rw_path(p, sizeof p, rwdir, links[i][1]);
		if (symlink(links[i][0], p))
			fail(links[i][1], errno);
	}
	rw_path(p, sizeof p, rwdir, ".masked");
	mkdir_p(p, 0555);
}

/* write_boot_id writes a fresh random (version 4) UUID to path, outside the
 * overlay's upper directory. Each start of a sandbox is a boot of its own:
 * the kernel's boot_id, which every sandbox of a host would share and which
 * would never change at a sandbox's restart, is covered by this file
 * (mask_paths). */
static void write_boot_id(const char *path)
{
	unsigned char b[16];
	char s[40];
	if (syscall(SYS_getrandom, b, sizeof b, 0) != (long)sizeof b)
		fail("getrandom boot id", errno ? errno : EIO);
	b[6] = (b[6] & 0x0f) | 0x40;
	b[8] = (b[8] & 0x3f) | 0x80;
	int n = snprintf(s, sizeof s,
			 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n",
			 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
			 b[12], b[13], b[14], b[15]);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444);
	if (fd < 0)
		fail(path, errno);
	if (write(fd, s, n) != n)
		fail("write boot id", errno ? errno : EIO);
	close(fd);
}

/* attach_lowers attaches the idmapped lower mounts (fds from the parent) on
 * rwdir/.lower/N and points the overlay at them. rwdir is not part of the
 * sandbox's root, so the sandbox never sees these paths. */
static void attach_lowers(struct config *c)
{
	static char paths[MAX_LOWER][4096];
	char p[4096];
	rw_path(p, sizeof p, c->rwdir, ".lower");
	mkdir_p(p, 0700);
	for (int i = 0; i < c->nlower; i++) {
		char rel[32];
		snprintf(rel, sizeof rel, ".lower/%d", i);
		rw_path(paths[i], sizeof paths[i], c->rwdir, rel);
		mkdir_p(paths[i], 0755);
		if (syscall(SYS_move_mount, c->lowerfds[i], "", AT_FDCWD, paths[i], MOVE_MOUNT_F_EMPTY_PATH_))
			fail("attach idmapped lower", errno);
		close(c->lowerfds[i]);
		c->lower[i] = paths[i];
	}
}

/* switch_root makes the overlay the root of a template clone without
 * pivot_root, whose walk over every task of the host grows with the number
 * of live sandboxes. This namespace is a copy of the spawner's template
 * (spawner.h): an empty read-only tmpfs on the namespace's rootfs, nothing
 * of the host. The writable-layer tmpfs (with the lowers attached below it;
 * the overlay holds its own clones of its layers, FD_RW keeps the tmpfs for
 * the host) is detached, the overlay moved over the template's root and the
 * init chrooted into it. What is left beneath the sandbox's root is that
 * empty tmpfs and the rootfs, as after a pivot_root (rootfs and the new
 * root): no mount of the host is in this namespace, so none can be reached
 * by walking up, unmounting or chrooting. */
static void switch_root(const struct config *c)
{
	if (umount2(c->rwdir, MNT_DETACH))
		fail("detach rwdir", errno);
	if (chdir(c->root))
		fail("chdir root", errno);
	if (mount(c->root, "/", NULL, MS_MOVE, NULL))
		fail("move root", errno);
	if (chroot("."))
		fail("chroot root", errno);
	if (chdir("/"))
		fail("chdir /", errno);
}

/* mount_root mounts the tmpfs for the writable layer (which also holds /dev)
 * and the overlay, clones the trees to attach later, then pivots into the
 * overlay. */
static void mount_root(struct config *c, struct trees *t)
{
	char opts[4096], upper[4096], work[4096], p[4096];

	snprintf(opts, sizeof opts, "size=%llu,mode=0755", c->rwsize);
	/* no MS_NODEV: the device nodes of /dev live here */
	xmount("tmpfs", c->rwdir, "tmpfs", MS_NOSUID, opts, "mount rwdir tmpfs");
	/* The idmapped lower mount fds (any numbers, FD_RW among them) are
	 * attached and closed before FD_RW is taken. */
	if (c->userns || c->tmpl)
		attach_lowers(c);
	/* keep the tmpfs reachable for the host after the pivot (FD_RW) */
	int rw = open(c->rwdir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rw < 0)
		fail("open rwdir", errno);
	if (rw != FD_RW) {
		if (dup3(rw, FD_RW, O_CLOEXEC) < 0)
			fail("keep rwdir", errno);
		close(rw);
	}
	rw_path(upper, sizeof upper, c->rwdir, "upper");
	rw_path(work, sizeof work, c->rwdir, "work");
	mkdir_p(upper, 0755);
	mkdir_p(work, 0755);
	populate_dev(c);
	rw_path(p, sizeof p, c->rwdir, "dev");
	t->dev = clone_tree(p, c->userns, "clone /dev"); /* with the bound nodes */
	rw_path(p, sizeof p, c->rwdir, ".masked");
	t->masked = clone_tree(p, 0, "clone masked dir");
	rw_path(p, sizeof p, c->rwdir, ".boot_id");
	write_boot_id(p);
	t->bootid = clone_tree(p, 0, "clone boot id");
	t->sys = -1;
	if (c->sysfs) {
		struct statfs sf;
		/* a template clone got both as fds (the paths are the host's) */
		t->sys = c->tmpl ? c->sysfsfd : clone_tree(c->sysfs, 1, "clone shared sysfs");
		if (fstatfs(t->sys, &sf))
			fail("statfs shared sysfs", errno);
		if (sf.f_type != SYSFS_MAGIC_)
			fail("shared sysfs is not a sysfs mount", EINVAL);
		/* A sysfs does not keep the network namespace it shows alive;
		 * this fd (close-on-exec, and out of the sandbox's reach as
		 * init is not dumpable) does, for as long as the sandbox runs. */
		int net = c->tmpl ? c->netfd : open(c->sysfsnet, O_RDONLY | O_CLOEXEC);
		if (net < 0)
			fail("open sysfs network namespace", errno);
		if (fstatfs(net, &sf))
			fail("statfs sysfs network namespace", errno);
		if (sf.f_type != NSFS_MAGIC_)
			fail("sysfsnet is not a namespace file", EINVAL);
	}

	/* mount(2) copies at most one page of options. xino=on: the layers
	 * are on different file systems (tmpfs upper, EROFS or host dirs
	 * below), and without it readdir's d_ino and stat's st_ino disagree
	 * for directories, which breaks programs that compare them (find,
	 * tar, Python's os.walk users, test suites). */
	size_t n = snprintf(opts, sizeof opts, "lowerdir=");
	for (int i = 0; i < c->nlower && n < sizeof opts; i++)
		n += snprintf(opts + n, sizeof opts - n, "%s%s", i ? ":" : "", c->lower[i]);
	if (n < sizeof opts)
		n += snprintf(opts + n, sizeof opts - n, ",upperdir=%s,workdir=%s%s%s", upper, work,
			      c->noxino ? "" : ",xino=on",
			      /* in a user namespace overlayfs may not use trusted.*
			       * xattrs: whiteouts of removed directories and opaque
			       * directories then fail with EIO (rm -rf of a lower
			       * directory); user.overlay.* works there */
			      c->userns ? ",userxattr" : "");
	if (n >= sizeof opts)
		fail("overlay options too long", E2BIG);
	/* nodev: device nodes belong in /dev only (images and the writable
	 * layer may carry others; they must not open) */
	xmount("overlay", c->root, "overlay", c->rootnodev ? MS_NODEV : 0, opts, "mount overlay");

	/* A proc mounted in a user namespace must not reveal more than a
	 * proc already visible in this mount namespace; after the pivot
	 * none is left, so make it now, detached, and attach it later. */
	t->proc = -1;
	if (c->userns) {
		int fs = syscall(SYS_fsopen, "proc", 1 /* FSOPEN_CLOEXEC */);
		if (fs < 0)
			fail("fsopen proc", errno);
		if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE_, NULL, NULL, 0))
			fail("create proc", errno);
		t->proc = syscall(SYS_fsmount, fs, 1 /* FSMOUNT_CLOEXEC */,
				  MOUNT_ATTR_NOSUID_ | MOUNT_ATTR_NODEV_ | MOUNT_ATTR_NOEXEC_);
		if (t->proc < 0)
			fail("fsmount proc", errno);
		close(fs);
	}

	if (c->tmpl) {
		switch_root(c);
		return;
	}
	/* pivot_root(".", ".") stacks the old root on top of the new one; the
	 * detach then drops every host mount from this namespace. */
	if (chdir(c->root))
		fail("chdir root", errno);
	if (syscall(SYS_pivot_root, ".", "."))
		fail("pivot_root", errno);
	if (umount2(".", MNT_DETACH))
		fail("detach old root", errno);
	if (chdir("/"))
		fail("chdir /", errno);
}

/* mount_system mounts /proc, /dev and /sys. It runs after pivot_root so that
 * symlinks in the image cannot redirect a mount onto the host. */
static void mount_system(const struct config *c, struct trees *t)
{
	mkdir_p("/proc", 0555);
	if (t->proc >= 0)
		attach_tree(&t->proc, "/proc", "attach /proc");
	else
		xmount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL, "mount /proc");

	mkdir_p("/dev", 0755);
	attach_tree(&t->dev, "/dev", "attach /dev");
	xmount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
	       "newinstance,ptmxmode=0666,mode=0620", "mount /dev/pts");
	/* /dev/shm is a directory of the same tmpfs, bound onto itself for
	 * its own mount flags */
	xmount("/dev/shm", "/dev/shm", NULL, MS_BIND, NULL, "bind /dev/shm");
	xmount(NULL, "/dev/shm", NULL, MS_BIND | MS_REMOUNT | MS_NOSUID | (c->rootnodev ? MS_NODEV : 0),
	       NULL, "remount /dev/shm");

	mkdir_p("/sys", 0555);
	if (t->sys < 0) {
		xmount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, NULL,
		       "mount /sys");
		return;
	}
	attach_tree(&t->sys, "/sys", "attach /sys");
	/* mounts below /sys (the masks) stay in this namespace, and the clone
	 * is read-only whatever the shared mount's flags */
	xmount(NULL, "/sys", NULL, MS_REC | MS_PRIVATE, NULL, "make /sys private");
	xmount(NULL, "/sys", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
	       NULL, "remount /sys read-only");
}

/* mask_paths applies the configured masked and read-only paths. Masked
 * directories get read-only binds of one empty directory of the writable
 * layer tmpfs, masked files binds of /dev/null. */
static void mask_paths(const struct config *c, struct trees *t)
{
	const char **masked = c->masked, **readonly = c->readonly;
	const char *empty = NULL; /* the first masked directory, once attached */
	const char *bootid = "/proc/sys/kernel/random/boot_id";
	struct stat st;

	/* the sandbox's own boot id (write_boot_id), read-only; below the
	 * read-only /proc/sys, which binds it along */
	attach_tree(&t->bootid, bootid, "attach boot id");
	xmount(NULL, bootid, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
	       NULL, "remount boot id read-only");

	for (int i = 0; i < c->nmasked; i++) {
		const char *p = masked[i];
		int r;
		if (lstat(p, &st)) {
			if (errno == ENOENT)
				continue;
			fail(p, errno);
		}
		if (!S_ISDIR(st.st_mode)) {
			r = mount("/dev/null", p, NULL, MS_BIND, NULL);
		} else if (!empty) {
			r = syscall(SYS_move_mount, t->masked, "", AT_FDCWD, p, MOVE_MOUNT_F_EMPTY_PATH_);
			if (r == 0)
				empty = p;
		} else {
			r = mount(empty, p, NULL, MS_BIND, NULL);
		}
		if (r == 0 && S_ISDIR(st.st_mode))
			r = mount(NULL, p, NULL,
				  MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
		if (r && errno != ENOENT)
			fail(p, errno);
	}
	close(t->masked);
	t->masked = -1;
	for (int i = 0; i < c->nreadonly; i++) {
		const char *p = readonly[i];
		if (mount(p, p, NULL, MS_BIND | MS_REC, NULL)) {
			if (errno == ENOENT)
				continue;
			fail(p, errno);
		}
		xmount(NULL, p, NULL,
		       MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL, p);
	}
}

/* write_hosts creates /etc/hosts when the image has none. */
static void write_hosts(const char *hostname)
{
	char buf[512];
	mkdir_p("/etc", 0755);
	int fd = open("/etc/hosts", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		if (errno == EEXIST)
			return;
		fail("/etc/hosts", errno);
	}
	int n = snprintf(buf, sizeof buf,
			 "127.0.0.1\tlocalhost %s\n::1\tlocalhost ip6-localhost ip6-loopback\n",
			 hostname);
	if (n >= (int)sizeof buf || write(fd, buf, n) != n)
		fail("write /etc/hosts", errno ? errno : EIO);
	close(fd);
}

/* drop_caps limits the bounding set and the process sets to keep.
 * The inheritable set is left empty (runc does the same since
 * CVE-2022-29162) so that file inheritable capabilities cannot hand a
 * non-root process capabilities. */
static void drop_caps(unsigned long long keep)
{
	int last = 40;
	char buf[16];

	int fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, buf, sizeof buf - 1);
		if (n > 0) {
			buf[n] = 0;
			last = atoi(buf);
		}
		close(fd);
	}
	for (int cap = 0; cap <= last; cap++) {
		if (cap < 64 && (keep & (1ULL << cap)))
			continue;
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) && errno != EINVAL)
			fail("drop bounding capability", errno);
	}
	struct cap_header h = {CAP_VERSION_3, 0};
	uint32_t lo = (uint32_t)keep, hi = (uint32_t)(keep >> 32);
	struct cap_data d[2] = {{lo, lo, 0}, {hi, hi, 0}};
	if (syscall(SYS_capset, &h, d))
		fail("capset", errno);
}

/* load_seccomp installs the filter from fd 7, if there is one. */
static void load_seccomp(void)
{
	static struct sock_filter insns[BPF_MAXINSNS_];
	int n = read_bpf(FD_SECCOMP, insns);
	if (n < 0)
		fail("read seccomp program", -n);
	if (n == 0)
		return;
	struct sock_fprog prog = {(unsigned short)n, insns};
	if (prctl(PR_SET_SECCOMP, MODE_FILTER, &prog, 0, 0))
		fail("install seccomp filter", errno);
}

/* write_ping_range lets the groups in range open ICMP datagram sockets
 * (ping without CAP_NET_RAW) in the sandbox's network namespace. */
static void write_ping_range(const char *range)
{
	int fd = open("/proc/sys/net/ipv4/ping_group_range", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		fail("open ping_group_range", errno);
	size_t n = strlen(range);
	if (write(fd, range, n) != (ssize_t)n)
		fail("write ping_group_range", errno ? errno : EIO);
	close(fd);
}

static void setup(struct config *c, int has_seccomp)
{
	if (!c->nocgroupns && unshare(CLONE_NEWCGROUP))
		fail("unshare cgroup namespace", errno);
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL))
		fail("make / rslave", errno);
	struct trees t;
	mount_root(c, &t);
	mount_system(c, &t);
	if (c->pingrange)
		write_ping_range(c->pingrange);
	mask_paths(c, &t);
	write_hosts(c->hostname);
	if (sethostname(c->hostname, strlen(c->hostname)))
		fail("sethostname", errno);
	const char *step = loopback_up();
	if (step)
		fail(step, errno);
	/* KSM opt-in: the flag is inherited across fork and exec by every process
	 * the init starts. */
	if (c->ksm && prctl(PR_SET_MEMORY_MERGE, 1, 0, 0, 0))
		fail("enable KSM (PR_SET_MEMORY_MERGE)", errno);
	if (c->setuid) {
		/* setuid=1: no no_new_privs, so a setuid or file-capability program
		 * (sudo) may raise a process to sandbox root, never beyond: the
		 * bounding set dropped below is inherited and cannot grow, and the
		 * seccomp filter cannot be removed. Without no_new_privs the filter
		 * needs CAP_SYS_ADMIN, so it is loaded before the capabilities go
		 * (it allows the capset and prctl that drop them). */
		if (has_seccomp)
			load_seccomp();
		drop_caps(c->caps);
	} else {
		drop_caps(c->caps);
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
			fail("no_new_privs", errno);
		if (has_seccomp)
			load_seccomp();
	}
	/* keep sandbox root away from our fds via /proc/1/fd */
	if (!c->dumpable && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0))
		fail("set non-dumpable", errno);
	if (fcntl(FD_LISTEN, F_SETFD, FD_CLOEXEC) ||
	    fcntl(FD_LISTEN, F_SETFL, fcntl(FD_LISTEN, F_GETFL) | O_NONBLOCK))
		fail("control socket", errno);
}

/* ======================= control loop ======================= */

/* proc is a process started by EXEC: running, or the exit record of a
 * tagged one. */
struct proc {
	pid_t pid;
	char *tag; /* NULL if untagged */
	int ptm;   /* a tagged process's terminal master, kept for WAIT; -1 if none */
	int running;
	struct exit_rec exit; /* once it is not running */
	unsigned long long seq; /* exit order, for evicting old records */
};

struct qpkt {
	struct qpkt *next;
	size_t len;
	char data[];
};

/* conn is a client connection. pid is the process EXEC started or WAIT
 * attached to (-1 once it exited: never signalled again); watching means
 * EXITED is still owed. Once its process exited, a connection may EXEC
 * again, so the node keeps idle connections instead of one per exec. */
struct conn {
	int fd;
	pid_t pid;
	int watching;
	int dead;
	struct qpkt *qhead, *qtail;
	int qlen;
};

/* pump copies a process's stdout or stderr from a pipe into the file the
 * node gave for it, up to cap bytes, then writes a marker once and drains
 * (discards) the rest, so a flood (`yes`) costs the sandbox CPU but never
 * more than cap bytes of the node's disk. It lives in the init, so it
 * survives a restart of the node agent. */
struct pump {
	int in, out;
	pid_t pid;
	long long written, cap;
	int dead, truncated;
};

struct state {
	int sfd;
	struct pump *pumps;
	int npumps, cappumps;
	struct proc *procs;
	int nprocs, capprocs, nrecords;
	struct conn *conns;
	int nconns, capconns;
	int listen_paused;
	unsigned long long seq;
	struct rlimit nofile; /* the limit to restore in children */
	int oom_reset;        /* children set oom_score_adj to 0 (the init's is not) */
	char *rbuf;           /* receive buffer, MAX_PACKET + 1 bytes */
	char **fields;        /* split packet, MAX_FIELDS entries */
	char **vec;           /* an EXEC's argv and envp, MAX_FIELDS + 2 entries */
};

static void conn_send(struct conn *c, const char *data, size_t len)
{
	if (c->dead)
		return;
	if (!c->qhead) {
		for (;;) {
			ssize_t n = send(c->fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
			if (n >= 0)
				return;
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
				break;
			c->dead = 1;
			return;
		}
	}
	if (c->qlen >= MAX_QUEUE) {
		logf_("dropping client: %d replies queued", c->qlen);
		c->dead = 1;
		return;
	}
	struct qpkt *q = xmalloc(sizeof *q + len);
	q->next = NULL;
	q->len = len;
	memcpy(q->data, data, len);
	if (c->qtail)
		c->qtail->next = q;
	else
		c->qhead = q;
	c->qtail = q;
	c->qlen++;
}

static void conn_flush(struct conn *c)
{
	while (c->qhead && !c->dead) {
		struct qpkt *q = c->qhead;
		ssize_t n = send(c->fd, q->data, q->len, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS)
				c->dead = 1;
			return;
		}
		c->qhead = q->next;
		if (!c->qhead)
			c->qtail = NULL;
		c->qlen--;
		free(q);
	}
}

static void send_out(struct conn *c, struct out *o)
{
	out_end(o);
	conn_send(c, o->buf, o->len);
}

static void send_error(struct conn *c, int err, const char *msg)
{
	send_out(c, out_error(err, NULL, msg));
}

/* send_fd sends a reply with one fd attached. A new connection's queue is
 * empty, so the reply goes out at once; if it cannot, the client gets an
 * ERROR rather than a reply without its fd. */
static void send_fd(struct conn *c, struct out *o, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {o->buf, o->len};
	struct msghdr msg;

	memset(&msg, 0, sizeof msg);
	memset(cbuf, 0, sizeof cbuf);
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = cbuf;
	msg.msg_controllen = sizeof cbuf;
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof fd);
	if (o->overflow) {
		send_out(c, o); /* an error now, and no fd to go with it */
		return;
	}
	if (c->dead)
		return;
	if (!c->qhead) {
		ssize_t n;
		do
			n = sendmsg(c->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
		while (n < 0 && errno == EINTR);
		if (n >= 0)
			return;
	}
	send_error(c, EAGAIN, "cannot pass the terminal now");
}

static void send_simple(struct conn *c, const char *op)
{
	conn_send(c, op, strlen(op) + 1);
}

static struct proc *find_running(struct state *s, pid_t pid)
{
	for (int i = 0; i < s->nprocs; i++)
		if (s->procs[i].running && s->procs[i].pid == pid)
			return &s->procs[i];
	return NULL;
}

static struct proc *find_tag(struct state *s, const char *tag)
{
	for (int i = 0; i < s->nprocs; i++)
		if (s->procs[i].tag && !strcmp(s->procs[i].tag, tag))
			return &s->procs[i];
	return NULL;
}

static void remove_proc(struct state *s, struct proc *p)
{
	if (!p->running && p->tag)
		s->nrecords--;
	free(p->tag);
	if (p->ptm >= 0)
		close(p->ptm);
	*p = s->procs[--s->nprocs];
}

/* trim_records evicts the oldest exit records beyond MAX_RECORDS. */
static void trim_records(struct state *s)
{
	while (s->nrecords > MAX_RECORDS) {
		struct proc *old = NULL;
		for (int i = 0; i < s->nprocs; i++)
			if (!s->procs[i].running && (!old || s->procs[i].seq < old->seq))
				old = &s->procs[i];
		if (!old)
			return;
		remove_proc(s, old);
	}
}

/* pump_read moves what is readable from one pump: one read, or with drain
 * until EAGAIN but at most a pipe's worth of reads (a process that inherited
 * the pipe may keep writing). */
static void pump_read(struct pump *p, int drain)
{
	static char buf[65536]; /* one process, one pump at a time */
	for (int rounds = 0; rounds < 16; rounds++) {
		ssize_t n = read(p->in, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			p->dead = 1;
			return;
		}
		long long room = p->cap - p->written;
		if (room > 0) {
			size_t w = n < room ? (size_t)n : (size_t)room;
			for (size_t off = 0; off < w;) {
				ssize_t m = write(p->out, buf + off, w - off);
				if (m < 0 && errno == EINTR)
					continue;
				if (m <= 0)
					break; /* e.g. disk full: keep draining */
				off += m;
			}
			p->written += w;
		}
		if (n > room && !p->truncated) {
			char msg[96];
			int l = snprintf(msg, sizeof msg, "\n[dsec: output truncated after %lld bytes]\n", p->cap);
			(void)!write(p->out, msg, l);
			p->truncated = 1;
		}
		if (!drain)
			return;
	}
}

static void drop_pumps(struct state *s)
{
	for (int i = 0; i < s->npumps;) {
		if (!s->pumps[i].dead) {
			i++;
			continue;
		}
		close(s->pumps[i].in);
		close(s->pumps[i].out);
		s->pumps[i] = s->pumps[--s->npumps];
	}
}

/* reap collects every exited child, reports tracked ones and keeps exit
 * records for tagged ones. PID 1 also reaps orphans here. */
static void reap(struct state *s)
{
	struct signalfd_siginfo si;
	struct exit_rec e;
	pid_t pid;

	while (read(s->sfd, &si, sizeof si) > 0)
		;
	while ((pid = reap_next(&e))) {
		struct proc *p = find_running(s, pid);
		if (!p)
			continue;
		p->running = 0;
		p->exit = e;
		/* what it wrote is in its pipes now: log it before the exit */
		for (int i = 0; i < s->npumps; i++)
			if (s->pumps[i].pid == pid)
				pump_read(&s->pumps[i], 1);
		for (int i = 0; i < s->nconns; i++) {
			struct conn *c = &s->conns[i];
			if (c->pid != pid)
				continue;
			if (c->watching)
				send_out(c, out_exited(pid, &p->exit));
			/* the pid may be reused now: never signal it again */
			c->watching = 0;
			c->pid = -1;
		}
		if (p->tag) {
			p->seq = ++s->seq;
			s->nrecords++;
			trim_records(s);
		} else {
			remove_proc(s, p);
		}
	}
}

/* oom_adj_nonzero reports whether the init's oom_score_adj (the node's, which
 * it inherited) is anything but 0 or cannot be read: then every child sets
 * its own back to 0, else it has 0 already and skips the open and write. */
static int oom_adj_nonzero(void)
{
	char b[16];
	int fd = open("/proc/self/oom_score_adj", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 1;
	ssize_t n = read(fd, b, sizeof b);
	close(fd);
	return !((n == 1 || (n == 2 && b[1] == '\n')) && b[0] == '0');
}

/* child_exec runs in the forked child and never returns. Failures are
 * reported as {step, errno} on the close-on-exec pipe ep. */
static void __attribute__((noreturn))
child_exec(struct state *s, struct exec_req *r, int fds[3], int ep)
{
	sigset_t none;

	/* init only ever changes these dispositions */
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	signal(SIGPIPE, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setrlimit(RLIMIT_NOFILE, &s->nofile);
	if (s->oom_reset) {
		int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
		if (fd >= 0) {
			(void)!write(fd, "0", 1);
			close(fd);
		}
	}
	int step = exec_steps(r, fds);
	int msg[2] = {step, errno};
	(void)!write(ep, msg, sizeof msg);
	_exit(127);
}

static void do_exec(struct state *s, struct conn *c, char **f, int nf, int *fds, int nfds)
{
	struct exec_req r;
	char msg[256];

	if (c->pid > 0) {
		send_error(c, EBUSY, "connection already has a process");
		return;
	}
	if (nfds != 3 && nfds != 4) {
		send_error(c, EINVAL, "EXEC needs 3 fds (4 with a terminal master to keep)");
		return;
	}
	int err = parse_exec(f, nf, s->vec, 0, &r);
	if (err) {
		send_error(c, err, r.err);
		return;
	}
	if (nfds == 4 && (!r.tag || !r.tty)) {
		send_error(c, EINVAL, "a 4th fd (terminal master) needs tag and tty=1");
		return;
	}
	if (r.tag) {
		struct proc *old = find_tag(s, r.tag);
		if (old && old->running) {
			send_error(c, EEXIST, "tag in use by a running process");
			return;
		}
		if (old)
			remove_proc(s, old);
	}

	/* with an output cap the process writes into pipes that the init
	 * pumps into the given files */
	int pin[2] = {-1, -1}, pout[2] = {-1, -1}, cfds[3] = {fds[0], fds[1], fds[2]};
	if (r.outcap) {
		if (pipe2(pin, O_CLOEXEC | O_NONBLOCK) || pipe2(pout, O_CLOEXEC | O_NONBLOCK)) {
			int e = errno;
			for (int i = 0; i < 2; i++) {
				if (pin[i] >= 0)
					close(pin[i]);
				if (pout[i] >= 0)
					close(pout[i]);
			}
			send_error(c, e, strerror(e));
			return;
		}
		/* the child's ends block, like any stdout */
		fcntl(pin[1], F_SETFL, 0);
		fcntl(pout[1], F_SETFL, 0);
		cfds[1] = pin[1];
		cfds[2] = pout[1];
	}
	int ep[2];
	if (pipe2(ep, O_CLOEXEC)) {
		send_error(c, errno, strerror(errno));
		goto out_pipes;
	}
	pid_t pid = fork();
	if (pid == 0)
		child_exec(s, &r, cfds, ep[1]);
	int ferr = errno;
	close(ep[1]);
	if (r.outcap) {
		close(pin[1]);
		close(pout[1]);
		pin[1] = pout[1] = -1;
	}
	if (pid < 0) {
		close(ep[0]);
		send_error(c, ferr, strerror(ferr));
		goto out_pipes;
	}
	int res[2];
	ssize_t n;
	do
		n = read(ep[0], res, sizeof res);
	while (n < 0 && errno == EINTR);
	close(ep[0]);
	if (n > 0) {
		/* the child failed before exec: reap it here, it is untracked */
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		int step = n == sizeof res && res[0] >= 0 && res[0] <= STEP_EXEC ? res[0] : STEP_EXEC;
		int err = n == sizeof res ? res[1] : EIO;
		snprintf(msg, sizeof msg, "%s %s: %s", step_names[step],
			 step == STEP_EXEC ? r.argv[0] : step == STEP_CHDIR && r.cwd ? r.cwd : "",
			 strerror(err));
		send_out(c, out_error(err, step_names[step], msg)); /* step= marks a start failure */
		goto out_pipes;
	}
	if (r.outcap) {
		int ins[2] = {pin[0], pout[0]};
		for (int i = 0; i < 2; i++) {
			if (s->npumps == s->cappumps)
				s->pumps = xrealloc(s->pumps, sizeof *s->pumps * (s->cappumps = s->cappumps * 2 + 8));
			struct pump *pp = &s->pumps[s->npumps];
			pp->out = fcntl(fds[i + 1], F_DUPFD_CLOEXEC, 0);
			if (pp->out < 0) {
				logf_("dup log fd: %s", strerror(errno));
				close(ins[i]);
				continue;
			}
			pp->in = ins[i];
			pp->pid = pid;
			pp->written = 0;
			pp->cap = (long long)r.outcap;
			pp->dead = 0;
			pp->truncated = 0;
			s->npumps++;
		}
		pin[0] = pout[0] = -1;
	}

	if (s->nprocs == s->capprocs)
		s->procs = xrealloc(s->procs, sizeof *s->procs * (s->capprocs = s->capprocs * 2 + 16));
	struct proc *p = &s->procs[s->nprocs++];
	memset(p, 0, sizeof *p);
	p->pid = pid;
	p->running = 1;
	p->tag = r.tag ? strdup(r.tag) : NULL;
	p->ptm = -1;
	if (nfds == 4) {
		p->ptm = fds[3]; /* kept: the caller's conn_read must not close it */
		fds[3] = -1;
	}
	c->pid = pid;
	c->watching = 1;
	struct out *o = out_begin("STARTED");
	out_add(o, "pid=%d", (int)pid);
	send_out(c, o);
	return;
out_pipes:
	for (int i = 0; i < 2; i++) {
		if (pin[i] >= 0)
			close(pin[i]);
		if (pout[i] >= 0)
			close(pout[i]);
	}
}


static void do_wait(struct state *s, struct conn *c, char **f, int nf)
{
	const char *tag = field(f, nf, "tag");
	struct proc *p = tag ? find_tag(s, tag) : NULL;
	struct out *o;

	if (!p) {
		send_error(c, ESRCH, "no such process");
		return;
	}
	if (c->pid) {
		send_error(c, EBUSY, "connection already has a process");
		return;
	}
	if (!p->running) {
		c->pid = -1;
		o = out_exited(p->pid, &p->exit);
	} else {
		c->pid = p->pid;
		c->watching = 1;
		o = out_begin("RUNNING");
		out_add(o, "pid=%d", (int)p->pid);
	}
	if (p->ptm >= 0) {
		out_add(o, "tty=1");
		send_fd(c, o, p->ptm);
		return;
	}
	send_out(c, o);
}


/* do_signal signals the tagged process group while its leader runs. Once the
 * leader is reaped its pid (and so the group id) may be reused. */
static void do_signal(struct state *s, struct conn *c, char **f, int nf)
{
	const char *tag = field(f, nf, "tag");
	struct proc *p = tag ? find_tag(s, tag) : NULL;
	int sig = parse_sig(f, nf);

	if (sig < 0) {
		send_error(c, EINVAL, "bad sig");
		return;
	}
	if (!p || !p->running) {
		send_error(c, ESRCH, "no such process");
		return;
	}
	if (kill(-p->pid, sig)) {
		send_error(c, errno, errno == ESRCH ? "no such process" : strerror(errno));
		return;
	}
	send_simple(c, "OK");
}

static void ps_send(void *c, struct out *o)
{
	send_out(c, o);
}

/* do_ps lists tagged processes; replies larger than one packet are split,
 * every packet but the last carrying more=1. */
static void do_ps(struct state *s, struct conn *c)
{
	struct out *o = out_begin("PS");
	for (int i = 0; i < s->nprocs; i++) {
		struct proc *p = &s->procs[i];
		if (p->tag)
			out_ps_entry(o, p->tag, p->pid, p->running, ps_send, c);
	}
	send_out(c, o);
}

/* handle_packet dispatches one request. f[0] is the op. */
static void handle_packet(struct state *s, struct conn *c, char **f, int nf, int *fds, int nfds)
{
	const char *op = f[0];

	if (!strcmp(op, "EXEC")) {
		do_exec(s, c, f, nf, fds, nfds);
		return;
	}
	if (nfds) {
		send_error(c, EINVAL, "unexpected fds");
		return;
	}
	if (!strcmp(op, "PING")) {
		send_simple(c, "PONG");
	} else if (!strcmp(op, "KILL")) {
		/* no reply, so a KILL never interleaves with the EXITED being
		 * waited for on the same connection */
		int sig = parse_sig(f, nf);
		if (sig >= 0 && c->pid > 0 && kill(-c->pid, sig) && errno != ESRCH)
			logf_("kill %d: %s", (int)c->pid, strerror(errno));
	} else if (!strcmp(op, "WAIT")) {
		do_wait(s, c, f, nf);
	} else if (!strcmp(op, "SIGNAL")) {
		do_signal(s, c, f, nf);
	} else if (!strcmp(op, "PS")) {
		do_ps(s, c);
	} else {
		send_error(c, EINVAL, "unknown op");
	}
}


/* conn_read receives and handles one packet. */
static void conn_read(struct state *s, struct conn *c)
{
	char cbuf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
	struct iovec iov = {s->rbuf, MAX_PACKET + 1};
	struct msghdr msg;
	int fds[MAX_FDS], nfds = 0;
	char **f = s->fields;

	memset(&msg, 0, sizeof msg);
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = cbuf;
	msg.msg_controllen = sizeof cbuf;
	ssize_t n = recvmsg(c->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0) {
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			c->dead = 1;
		return;
	}
	nfds = recv_fds(&msg, fds, MAX_FDS);
	if (n == 0) {
		c->dead = 1; /* peer closed (or sent an empty packet) */
	} else if (msg.msg_flags & MSG_TRUNC) {
		send_error(c, EMSGSIZE, "packet too large");
	} else if (msg.msg_flags & MSG_CTRUNC) {
		send_error(c, EINVAL, "too many fds");
	} else if (s->rbuf[n - 1] != 0) {
		send_error(c, EINVAL, "packet not NUL-terminated");
	} else {
		int nf = split_fields(s->rbuf, n, f);
		if (nf < 0)
			send_error(c, E2BIG, "too many fields");
		else
			handle_packet(s, c, f, nf, fds, nfds);
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
}

static void accept_conns(struct state *s)
{
	for (;;) {
		int fd = accept4(FD_LISTEN, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
			    errno != ECONNABORTED) {
				/* e.g. EMFILE: stop polling the socket for a while */
				logf_("accept: %s; pausing", strerror(errno));
				s->listen_paused = 1;
			}
			return;
		}
		if (s->nconns == s->capconns)
			s->conns = xrealloc(s->conns, sizeof *s->conns * (s->capconns = s->capconns * 2 + 16));
		struct conn *c = &s->conns[s->nconns++];
		memset(c, 0, sizeof *c);
		c->fd = fd;
	}
}

static void drop_dead(struct state *s)
{
	for (int i = 0; i < s->nconns;) {
		struct conn *c = &s->conns[i];
		if (!c->dead) {
			i++;
			continue;
		}
		close(c->fd);
		while (c->qhead) {
			struct qpkt *q = c->qhead;
			c->qhead = q->next;
			free(q);
		}
		*c = s->conns[--s->nconns];
		s->listen_paused = 0;
	}
}

static void __attribute__((noreturn)) serve(struct state *s)
{
	struct pollfd *pfd = NULL;
	int cap = 0;

	for (;;) {
		int n = s->nconns + 2, np = s->npumps;
		if (n + np > cap)
			pfd = xrealloc(pfd, sizeof *pfd * (cap = (n + np) * 2));
		pfd[0] = (struct pollfd){s->listen_paused ? -1 : FD_LISTEN, POLLIN, 0};
		pfd[1] = (struct pollfd){s->sfd, POLLIN, 0};
		for (int i = 0; i < s->nconns; i++)
			pfd[i + 2] = (struct pollfd){s->conns[i].fd,
						     POLLIN | (s->conns[i].qhead ? POLLOUT : 0), 0};
		for (int i = 0; i < np; i++)
			pfd[n + i] = (struct pollfd){s->pumps[i].in, POLLIN, 0};
		if (poll(pfd, n + np, s->listen_paused ? 1000 : -1) < 0) {
			if (errno == EINTR)
				continue;
			logf_("poll: %s", strerror(errno));
			_exit(1);
		}
		s->listen_paused = 0;
		/* connections first: a reply to EXEC must precede its EXITED */
		for (int i = 0; i < n - 2; i++) {
			struct conn *c = &s->conns[i];
			short re = pfd[i + 2].revents;
			if (re & POLLOUT)
				conn_flush(c);
			if (re & (POLLIN | POLLHUP | POLLERR))
				conn_read(s, c);
		}
		for (int i = 0; i < np; i++)
			if (pfd[n + i].revents)
				pump_read(&s->pumps[i], 0);
		if (pfd[1].revents)
			reap(s);
		drop_pumps(s);
		if (pfd[0].revents)
			accept_conns(s);
		drop_dead(s);
	}
}

#include "spawner.h"

int main(int argc, char **argv)
{
	struct config cfg;
	struct state s;
	sigset_t mask;

	if ((argc == 2 || argc == 3) && !strcmp(argv[1], "spawner"))
		return spawner_main(argc == 3 ? argv[2] : NULL);
	memset(&s, 0, sizeof s);
	/* Drop every fd the spawning process leaked past the layout (fds it
	 * inherited without O_CLOEXEC), so none can reach the sandbox. */
	if (syscall(SYS_close_range, FD_SECCOMP + 1, ~0U, 0)) {
		struct rlimit rl;
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
			for (rlim_t fd = FD_SECCOMP + 1; fd < rl.rlim_cur && fd < 65536; fd++)
				close(fd);
	}
	/* fd 7 is optional; look before setup opens anything that could
	 * land on that number */
	int has_seccomp = fcntl(FD_SECCOMP, F_GETFD) >= 0;
	signal(SIGPIPE, SIG_IGN);
	read_config(&cfg);
	wait_sync(&cfg);

	/* PID 1 only gets signals it handles; ignore the usual stop requests
	 * and take SIGCHLD through a signalfd (created below, after the setup
	 * fds are closed). */
	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	getrlimit(RLIMIT_NOFILE, &s.nofile);
	struct rlimit raised = {s.nofile.rlim_max, s.nofile.rlim_max};
	setrlimit(RLIMIT_NOFILE, &raised);

	umask(0);
	setup(&cfg, has_seccomp);
	umask(022);

	if (write(FD_STATUS, "OK\n", 3) != 3)
		_exit(1);
	close(FD_CONFIG);
	close(FD_SYNC);
	close(FD_STATUS);
	if (has_seccomp)
		close(FD_SECCOMP);
	s.sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (s.sfd < 0) {
		logf_("signalfd: %s", strerror(errno));
		_exit(1);
	}
	s.oom_reset = oom_adj_nonzero();
	s.rbuf = xmalloc(MAX_PACKET + 1);
	s.fields = xmalloc(sizeof(char *) * MAX_FIELDS);
	s.vec = xmalloc(sizeof(char *) * (MAX_FIELDS + 2));
	serve(&s);
}

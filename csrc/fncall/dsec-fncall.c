/*
 * dsec-fncall: the FnCall zygote. One long-lived process per pool member; it
 * sits in a prepared mount namespace (a read-only skeleton root: the image's
 * top-level directories bind-mounted read-only, a minimal /dev, empty /proc
 * and /w mount points, /tmp -> /w/tmp) and forks one sandbox per request.
 *
 *   dsec-fncall ROOTFS STAGE NSLOTS NCG
 *
 * Inherited file descriptors:
 *   3          control socket (SOCK_SEQPACKET) to the Go engine
 *   4          seccomp program (raw struct sock_filter array, read with pread)
 *   5 ...      cgroup.procs files, NCG per slot, slot-major
 *
 * The Go side starts it in fresh mount, network, uts and ipc namespaces. At
 * start it makes one empty network namespace per slot (loopback up) so
 * concurrent runs never share one (abstract unix sockets), then pivots into
 * the skeleton.
 *
 * Per run request (struct req + strings, fds: stdin, stdout, stderr, files):
 *   zygote: clone(CLONE_NEWPID) -> helper H, PID 1 of a new pid namespace:
 *     unshare(mount, ipc), setns(slot netns), join the slot's cgroups, mount
 *     a fresh size-limited tmpfs on /w (owned by the run's uid) and, if asked,
 *     a fresh /proc; copy the files into /w; fork the program P:
 *       P: stdio, rlimits, setsid, drop to uid/gid with no groups, chdir,
 *          no_new_privs, seccomp, execve.
 *     H waits for P, reports P's wait status and exits, which makes the
 *     kernel kill and reap everything else in the pid namespace (a child
 *     outliving its parent dies with it).
 *   zygote: reaps H (rusage covers P and every descendant) and reports.
 *
 * Events (struct ev) go back over the control socket: STARTED (pid of H, as
 * the zygote sees it), SETUP_ERR, EXEC_ERR, EXIT (P's status, sent by H),
 * REAPED (H's status and rusage; always the last event of a run).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Kernel ABI (musl ships no linux/ headers). */
struct sock_filter {
	uint16_t code;
	uint8_t jt, jf;
	uint32_t k;
};
struct sock_fprog {
	unsigned short len;
	struct sock_filter *filter;
};
#define SECCOMP_SET_MODE_FILTER 1

#define FD_CTL 3
#define FD_SECCOMP 4
#define FD_CG0 5

#define MAX_SLOTS 256
#define MAX_FILES 64
#define MAX_MSG (256 * 1024)

enum { OP_RUN = 1, OP_KILL = 2 };
enum { EV_STARTED = 1, EV_SETUP_ERR = 2, EV_EXEC_ERR = 3, EV_EXIT = 4, EV_REAPED = 5, EV_FATAL = 6 };
enum { F_PROC = 1 };

struct req {
	uint32_t op;
	uint32_t slot;
	uint64_t id;
	uint32_t uid, gid;
	uint32_t flags;
	uint32_t nfiles;
	uint64_t rl_cpu;   /* seconds; 0: none */
	uint64_t rl_fsize; /* bytes; 0: none */
	uint64_t rl_nproc; /* 0: none */
	uint64_t rl_nofile;
	uint64_t rl_stack; /* 0: leave */
	uint64_t tmpfs_size;
	uint32_t argc, envc;
	uint32_t strbytes; /* argv, env, cwd, then per file "MODE:NAME", each NUL-terminated */
	uint32_t pad;
};

struct ev {
	uint32_t kind;
	int32_t err;
	uint64_t id;
	int32_t pid;
	int32_t status;
	int64_t utime_us, stime_us, maxrss_kb;
	char msg[80];
};

static int nslots, ncg;
static int netfd[MAX_SLOTS];
static struct sock_fprog seccomp_prog;

struct run {
	uint64_t id;
	pid_t pid;
};
static struct run runs[MAX_SLOTS * 2];

static void send_ev(struct ev *e)
{
	while (send(FD_CTL, e, sizeof *e, MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
}

static void evmsg(uint32_t kind, uint64_t id, int err, const char *msg)
{
	struct ev e = {.kind = kind, .id = id, .err = err};
	if (msg)
		snprintf(e.msg, sizeof e.msg, "%s", msg);
	send_ev(&e);
}

static void die(const char *what)
{
	int err = errno;
	char buf[80];
	snprintf(buf, sizeof buf, "%s", what);
	evmsg(EV_FATAL, 0, err, buf);
	fprintf(stderr, "dsec-fncall: %s: %s\n", what, strerror(err));
	exit(1);
}

/* ---- start-up: skeleton root, per-slot network namespaces ---------------- */

static int skip_entry(const char *n)
{
	static const char *skip[] = {".", "..", "proc", "dev", "tmp", "w", "sys", "run", NULL};
	for (int i = 0; skip[i]; i++)
		if (!strcmp(n, skip[i]))
			return 1;
	return 0;
}

static void bind_ro(const char *src, const char *dst)
{
	if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL))
		die("bind image directory");
	if (mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL))
		die("remount image directory read-only");
}

static void make_dev(const char *stage)
{
	static const char *devs[] = {"null", "zero", "full", "random", "urandom", NULL};
	char p[4096], s[64];
	snprintf(p, sizeof p, "%s/dev", stage);
	if (mkdir(p, 0755) && errno != EEXIST)
		die("mkdir /dev");
	if (mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755"))
		die("mount /dev tmpfs");
	for (int i = 0; devs[i]; i++) {
		snprintf(p, sizeof p, "%s/dev/%s", stage, devs[i]);
		snprintf(s, sizeof s, "/dev/%s", devs[i]);
		int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
		if (fd < 0)
			die("create device mount point");
		close(fd);
		if (mount(s, p, NULL, MS_BIND, NULL))
			die("bind device");
	}
	static const char *links[][2] = {{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
		{"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"}, {"shm", "/w/shm"}, {NULL, NULL}};
	for (int i = 0; links[i][0]; i++) {
		snprintf(p, sizeof p, "%s/dev/%s", stage, links[i][0]);
		if (symlink(links[i][1], p))
			die("dev symlink");
	}
	snprintf(p, sizeof p, "%s/dev", stage);
	if (mount(NULL, p, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL))
		die("remount /dev read-only");
}

static void build_root(const char *rootfs, const char *stage)
{
	char src[4096], dst[4096];
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
		die("make mounts private");
	if (mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755"))
		die("mount skeleton tmpfs");
	DIR *d = opendir(rootfs);
	if (!d)
		die("open image root");
	struct dirent *e;
	while ((e = readdir(d))) {
		if (skip_entry(e->d_name))
			continue;
		snprintf(src, sizeof src, "%s/%s", rootfs, e->d_name);
		snprintf(dst, sizeof dst, "%s/%s", stage, e->d_name);
		struct stat st;
		if (lstat(src, &st))
			die("stat image entry");
		if (S_ISLNK(st.st_mode)) {
			char t[4096];
			ssize_t n = readlink(src, t, sizeof t - 1);
			if (n < 0)
				die("readlink image entry");
			t[n] = 0;
			if (symlink(t, dst))
				die("copy image symlink");
		} else if (S_ISDIR(st.st_mode)) {
			if (mkdir(dst, 0755))
				die("mkdir skeleton dir");
			bind_ro(src, dst);
		} else if (S_ISREG(st.st_mode)) {
			int fd = open(dst, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
			if (fd < 0)
				die("create skeleton file");
			close(fd);
			bind_ro(src, dst);
		}
	}
	closedir(d);
	static const char *dirs[] = {"proc", "w", "run", NULL};
	for (int i = 0; dirs[i]; i++) {
		snprintf(dst, sizeof dst, "%s/%s", stage, dirs[i]);
		if (mkdir(dst, 0755))
			die("mkdir skeleton mount point");
	}
	snprintf(dst, sizeof dst, "%s/tmp", stage);
	if (symlink("/w/tmp", dst))
		die("symlink /tmp");
	make_dev(stage);
	if (mount(NULL, stage, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=1m,mode=0755"))
		die("remount skeleton read-only");
}

static void lo_up(void)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		die("socket for lo");
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	strcpy(ifr.ifr_name, "lo");
	if (ioctl(s, SIOCGIFFLAGS, &ifr))
		die("get lo flags");
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr))
		die("bring lo up");
	close(s);
}

static void make_netns(void)
{
	for (int i = 0; i < nslots; i++) {
		if (unshare(CLONE_NEWNET))
			die("unshare network namespace");
		lo_up();
		netfd[i] = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
		if (netfd[i] < 0)
			die("open network namespace");
	}
}

static void pivot(const char *stage)
{
	if (chdir(stage))
		die("chdir skeleton");
	if (syscall(SYS_pivot_root, ".", "."))
		die("pivot_root");
	if (umount2(".", MNT_DETACH))
		die("detach old root");
	if (chdir("/"))
		die("chdir /");
}

static void load_seccomp(void)
{
	struct stat st;
	if (fstat(FD_SECCOMP, &st) || st.st_size <= 0 || st.st_size % 8)
		die("seccomp program");
	struct sock_filter *f = malloc(st.st_size);
	if (!f)
		die("malloc");
	for (off_t off = 0; off < st.st_size;) {
		ssize_t n = pread(FD_SECCOMP, (char *)f + off, st.st_size - off, off);
		if (n <= 0)
			die("read seccomp program");
		off += n;
	}
	seccomp_prog.len = st.st_size / 8;
	seccomp_prog.filter = f;
	close(FD_SECCOMP);
}

/* ---- per run ------------------------------------------------------------- */

static void write_full(int fd, const char *s)
{
	size_t n = strlen(s);
	while (n > 0) {
		ssize_t w = write(fd, s, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		s += w;
		n -= w;
	}
}

static void setup_fail(uint64_t id, const char *what)
{
	evmsg(EV_SETUP_ERR, id, errno, what);
	_exit(125);
}

static int mkdirs_for(const char *path, uid_t uid, gid_t gid)
{
	char p[4096];
	snprintf(p, sizeof p, "%s", path);
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		if (mkdir(p, 0755) == 0) {
			if (chown(p, uid, gid))
				return -1;
		} else if (errno != EEXIST) {
			return -1;
		}
		*s = '/';
	}
	return 0;
}

static int copy_file(int src, const char *dst, mode_t mode, uid_t uid, gid_t gid)
{
	if (mkdirs_for(dst, uid, gid))
		return -1;
	int fd = open(dst, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, mode & 07777);
	if (fd < 0)
		return -1;
	off_t off = 0;
	for (;;) {
		ssize_t n = sendfile(fd, src, &off, 1 << 30);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			close(fd);
			return -1;
		}
		if (n == 0)
			break;
	}
	if (fchown(fd, uid, gid) || fchmod(fd, mode & 07777)) {
		close(fd);
		return -1;
	}
	return close(fd);
}

static void set_rl(int res, uint64_t soft, uint64_t hard)
{
	struct rlimit rl = {.rlim_cur = soft, .rlim_max = hard};
	setrlimit(res, &rl);
}

extern char **environ;

static void run_child(struct req *r, char **argv, char **envp, const char *cwd, char **fnames, int *fds)
{
	uint64_t id = r->id;
	sigset_t all;
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	signal(SIGPIPE, SIG_DFL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (unshare(CLONE_NEWNS | CLONE_NEWIPC))
		setup_fail(id, "unshare mount, ipc");
	if (setns(netfd[r->slot], CLONE_NEWNET))
		setup_fail(id, "join network namespace");
	for (int i = 0; i < ncg; i++) {
		int fd = FD_CG0 + (int)r->slot * ncg + i;
		if (write(fd, "0", 1) != 1)
			setup_fail(id, "join cgroup");
	}
	char opts[128];
	snprintf(opts, sizeof opts, "size=%llu,nr_inodes=16384,mode=0755,uid=%u,gid=%u",
		(unsigned long long)r->tmpfs_size, r->uid, r->gid);
	if (mount("tmpfs", "/w", "tmpfs", MS_NOSUID | MS_NODEV, opts))
		setup_fail(id, "mount /w");
	if (mkdir("/w/tmp", 01777) || chmod("/w/tmp", 01777) || chown("/w/tmp", r->uid, r->gid))
		setup_fail(id, "mkdir /w/tmp");
	if (r->flags & F_PROC) {
		if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL))
			setup_fail(id, "mount /proc");
	}
	for (uint32_t i = 0; i < r->nfiles; i++) {
		char *colon = strchr(fnames[i], ':');
		if (!colon)
			setup_fail(id, "file entry");
		mode_t mode = strtoul(fnames[i], NULL, 8);
		char dst[4096];
		snprintf(dst, sizeof dst, "/w/%s", colon + 1);
		if (copy_file(fds[3 + i], dst, mode, r->uid, r->gid))
			setup_fail(id, "write file");
		close(fds[3 + i]);
	}
	pid_t p = fork();
	if (p < 0)
		setup_fail(id, "fork program");
	if (p == 0) {
		if (dup2(fds[0], 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[2], 2) < 0)
			setup_fail(id, "stdio");
		/* everything else is closed by execve */
		syscall(SYS_close_range, 3, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */);
		setsid();
		if (r->rl_cpu)
			set_rl(RLIMIT_CPU, r->rl_cpu, r->rl_cpu + 1);
		if (r->rl_fsize)
			set_rl(RLIMIT_FSIZE, r->rl_fsize, r->rl_fsize);
		if (r->rl_nproc)
			set_rl(RLIMIT_NPROC, r->rl_nproc, r->rl_nproc);
		if (r->rl_nofile)
			set_rl(RLIMIT_NOFILE, r->rl_nofile, r->rl_nofile);
		if (r->rl_stack)
			set_rl(RLIMIT_STACK, r->rl_stack, r->rl_stack);
		set_rl(RLIMIT_CORE, 0, 0);
		set_rl(RLIMIT_MEMLOCK, 0, 0);
		set_rl(RLIMIT_MSGQUEUE, 0, 0);
		if (setgroups(0, NULL) || setresgid(r->gid, r->gid, r->gid) || setresuid(r->uid, r->uid, r->uid))
			setup_fail(id, "drop privileges");
		if (chdir(cwd))
			setup_fail(id, "chdir");
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
			setup_fail(id, "no_new_privs");
		if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &seccomp_prog))
			setup_fail(id, "seccomp");
		environ = envp;
		execvp(argv[0], argv);
		evmsg(EV_EXEC_ERR, id, errno, argv[0]);
		_exit(127);
	}
	close(fds[0]);
	close(fds[1]);
	close(fds[2]);
	/* PID 1: reap until the program exits, then leave (the kernel kills and
	 * reaps whatever else is left in this pid namespace). */
	for (;;) {
		int st;
		pid_t w = waitpid(-1, &st, __WALL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			_exit(126);
		if (w == p) {
			struct ev e = {.kind = EV_EXIT, .id = id, .pid = p, .status = st};
			send_ev(&e);
			_exit(0);
		}
	}
}

static int parse_strings(struct req *r, char *s, size_t n, char ***argv, char ***envp, char **cwd, char ***fnames)
{
	size_t total = (size_t)r->argc + r->envc + 1 + r->nfiles;
	if (r->argc < 1 || r->argc > 4096 || r->envc > 4096 || r->nfiles > MAX_FILES || n == 0 || s[n - 1] != 0)
		return -1;
	char **v = calloc(total + 3, sizeof(char *));
	if (!v)
		return -1;
	size_t k = 0;
	for (char *p = s; p < s + n && k < total; p += strlen(p) + 1)
		v[k++] = p;
	if (k != total) {
		free(v);
		return -1;
	}
	/* layout: argv..., NULL, env..., NULL, cwd, files... */
	char **out = calloc(total + 3, sizeof(char *));
	if (!out) {
		free(v);
		return -1;
	}
	size_t o = 0, i = 0;
	*argv = out + o;
	for (uint32_t j = 0; j < r->argc; j++)
		out[o++] = v[i++];
	out[o++] = NULL;
	*envp = out + o;
	for (uint32_t j = 0; j < r->envc; j++)
		out[o++] = v[i++];
	out[o++] = NULL;
	*cwd = v[i++];
	*fnames = out + o;
	for (uint32_t j = 0; j < r->nfiles; j++)
		out[o++] = v[i++];
	free(v);
	return 0;
}

static void handle_run(struct req *r, char *s, size_t n, int *fds, int nfds)
{
	char **argv, **envp, **fnames, *cwd;
	if (r->slot >= (uint32_t)nslots || nfds != 3 + (int)r->nfiles ||
		parse_strings(r, s, n, &argv, &envp, &cwd, &fnames)) {
		errno = EINVAL;
		evmsg(EV_SETUP_ERR, r->id, EINVAL, "malformed request");
		return;
	}
	int slot = -1;
	for (int i = 0; i < (int)(sizeof runs / sizeof runs[0]); i++)
		if (runs[i].pid == 0) {
			slot = i;
			break;
		}
	if (slot < 0) {
		evmsg(EV_SETUP_ERR, r->id, EAGAIN, "too many runs");
		free(argv);
		return;
	}
	pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, 0, 0, 0, 0);
	if (pid < 0) {
		evmsg(EV_SETUP_ERR, r->id, errno, "clone");
		free(argv);
		return;
	}
	if (pid == 0)
		run_child(r, argv, envp, cwd, fnames, fds);
	runs[slot].id = r->id;
	runs[slot].pid = pid;
	struct ev e = {.kind = EV_STARTED, .id = r->id, .pid = pid};
	send_ev(&e);
	free(argv);
}

static void handle_kill(struct req *r)
{
	for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++)
		if (runs[i].pid && runs[i].id == r->id)
			kill(runs[i].pid, SIGKILL);
}

static void reap(void)
{
	for (;;) {
		int st;
		struct rusage ru;
		pid_t w = wait4(-1, &st, WNOHANG | __WALL, &ru);
		if (w <= 0)
			return;
		for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
			if (runs[i].pid != w)
				continue;
			struct ev e = {.kind = EV_REAPED, .id = runs[i].id, .pid = w, .status = st,
				.utime_us = ru.ru_utime.tv_sec * 1000000LL + ru.ru_utime.tv_usec,
				.stime_us = ru.ru_stime.tv_sec * 1000000LL + ru.ru_stime.tv_usec,
				.maxrss_kb = ru.ru_maxrss};
			runs[i].pid = 0;
			send_ev(&e);
			break;
		}
	}
}

static char msgbuf[MAX_MSG];

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: dsec-fncall ROOTFS STAGE NSLOTS NCG\n");
		return 2;
	}
	nslots = atoi(argv[3]);
	ncg = atoi(argv[4]);
	if (nslots < 1 || nslots > MAX_SLOTS || ncg < 0 || ncg > 8)
		die("bad slot count");
	(void)write_full;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1)
		return 1;
	load_seccomp();
	make_netns();
	build_root(argv[1], argv[2]);
	pivot(argv[2]);

	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		die("signalfd");
	fcntl(FD_CTL, F_SETFD, FD_CLOEXEC);
	struct ev ready = {.kind = EV_STARTED, .id = 0, .pid = getpid()};
	send_ev(&ready);

	for (;;) {
		struct pollfd pfd[2] = {{.fd = FD_CTL, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			die("poll");
		}
		if (pfd[1].revents) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof si) > 0)
				;
			reap();
		}
		if (!pfd[0].revents)
			continue;
		char cbuf[CMSG_SPACE(sizeof(int) * (MAX_FILES + 3))];
		struct iovec iov = {.iov_base = msgbuf, .iov_len = sizeof msgbuf};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
		ssize_t n = recvmsg(FD_CTL, &mh, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			/* The engine is gone: kill every run and leave. */
			for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++)
				if (runs[i].pid)
					kill(runs[i].pid, SIGKILL);
			return 0;
		}
		int fds[MAX_FILES + 3];
		int nfds = 0;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
				int k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
				for (int i = 0; i < k && nfds < MAX_FILES + 3; i++)
					memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			}
		}
		if ((size_t)n >= sizeof(struct req)) {
			struct req r;
			memcpy(&r, msgbuf, sizeof r);
			if (r.op == OP_RUN && r.strbytes == (size_t)n - sizeof r && !(mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC)))
				handle_run(&r, msgbuf + sizeof r, r.strbytes, fds, nfds);
			else if (r.op == OP_KILL)
				handle_kill(&r);
			else
				evmsg(EV_SETUP_ERR, r.id, EINVAL, "malformed request");
		}
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
	}
}

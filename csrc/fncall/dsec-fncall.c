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
 *   then       one request socket (SOCK_SEQPACKET) per slot, the engine
 *              holding the other end
 *   then       the run gates: a memory file the engine maps too, one
 *              32-bit word per slot (see "Cancellation" below)
 *
 * The Go side starts it in fresh mount, network, uts and ipc namespaces. At
 * start it makes one empty network namespace per slot (loopback up) so
 * concurrent runs never share one (abstract unix sockets), then pivots into
 * the skeleton.
 *
 * Per slot there is always one helper H, PID 1 of a new pid namespace,
 * cloned (clone(CLONE_NEWPID)) as soon as the slot's previous run was
 * reaped: it unshares mount and ipc namespaces, joins the slot's network
 * namespace and cgroups, mounts a fresh size-limited tmpfs on /w (owned by
 * the run's uid) and, if asked, a fresh /proc; takes no_new_privs and the
 * seccomp filter; then waits for its request on the slot's socket. So the
 * sandbox is ready before the request comes, and the request goes from the
 * engine straight to H (struct req + strings, fds: stdin, stdout, stderr,
 * files). H copies the files into /w and forks the program P on its own
 * CPU (bound there from vfork until P has exec'd: H sleeps at once and P, in
 * H's scheduler group, takes the CPU over instead of waiting for another; H is
 * real-time from the vfork until it reported P's exit, see run_helper):
 *   P: stdio, rlimits, drop to uid/gid with no groups, chdir, execve
 *      (seccomp, no_new_privs and H's session are inherited from H).
 * H makes its own session (setsid) while it is prepared, not P per run: with
 * scheduler autogroups on (the default on most distributions) every new
 * session is a new scheduler group, and a program that made one per run was
 * switched out right after setsid until the busy CPU's next tick (up to 4 ms
 * at HZ=250; FnCall 2.8-5.3x a bare spawn with the cores busy).
 * H waits for P, reports P's wait status and exits, which makes the kernel
 * kill and reap everything else in the pid namespace (a child outliving its
 * parent dies with it). The zygote reaps H (rusage covers P and every
 * descendant), reports, and clones the slot's next H. Each H serves one
 * request and dies with its namespaces: nothing is shared between runs.
 *
 * Control requests (struct req on the control socket): PREPARE replaces the
 * slot's H by one with other namespace parameters (uid, tmpfs size, /proc;
 * the engine sends it before a request that needs them, and waits for
 * PREPARED); KILL kills a run (one that already ended is left alone, and
 * with it the slot's next helper); STATUS counts the helpers that are not idle
 * (benchmarks wait for 0). A request on a slot with no H (its setup failed)
 * gets a fresh one, or fails with SETUP_ERR and REAPED.
 *
 * Cancellation: a request that went out can no longer be taken back, and H
 * (real-time) takes it at once, so a KILL the engine sends when the run's
 * context ends during the send came after P had started. So P passes the
 * slot's gate (a word in memory the engine, the zygote, H and P share) right
 * before its execve: the engine sets it to ARMED before it sends the request
 * and, once the send returned, to GO, or to CANCELED when the run's context
 * ended meanwhile; P waits for either (a futex, marked WAITING, in the rare
 * case it gets there first) and on CANCELED kills itself instead of running
 * the program. A run whose context ended before the engine's send returned
 * never runs a single instruction of its program.
 *
 * Events (struct ev) go back over the control socket: STARTED (the zygote is
 * ready), PREPARED, STATUS, SETUP_ERR, EXEC_ERR, EXIT (P's status, sent by H),
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
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/fds.h"
#include "../common/sys.h"

#ifndef SCHED_RESET_ON_FORK
#define SCHED_RESET_ON_FORK 0x40000000
#endif

#define SECCOMP_SET_MODE_FILTER 1
#define FUTEX_WAIT 0

#define FD_CTL 3
#define FD_SECCOMP 4
#define FD_CG0 5

#define MAX_SLOTS 256
#define MAX_FILES FNCALL_MAX_FILES
#define MAX_MSG FNCALL_MAX_MSG

enum { OP_RUN = 1, OP_KILL = 2, OP_PREPARE = 3, OP_STATUS = 4 };
enum { EV_STARTED = 1, EV_SETUP_ERR = 2, EV_EXEC_ERR = 3, EV_EXIT = 4, EV_REAPED = 5, EV_FATAL = 6, EV_PREPARED = 8,
	EV_STATUS = 9 };
#define MAX_VEC (4096 + 4096 + 1 + MAX_FILES + 3)
/* F_LATE_SECCOMP: H takes no_new_privs and the seccomp filter after it set
 * up the request's files rather than before it waits for the request, so it
 * can bind-mount the ones the engine passes as detached mounts (a compiled
 * program from the compile cache: no copy per run). */
enum { F_PROC = 1, F_LATE_SECCOMP = 2 };
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#define MOVE_MOUNT_F_EMPTY_PATH_ 0x00000004
/* the run gates (see the header; internal/backend/fncall/zygote.go) */
enum { GATE_ARMED = 0, GATE_GO = 1, GATE_CANCELED = 2, GATE_WAITING = 3 };
#define GATES_SIZE 4096
_Static_assert(MAX_SLOTS * sizeof(uint32_t) <= GATES_SIZE, "a gate per slot");

static int nslots, ncg;
static mode_t run_umask; /* the zygote's, which programs get (H uses 0) */
static int tracing;
static int netfd[MAX_SLOTS];
static uint32_t *gates; /* GATES_SIZE, shared with the engine */
static struct sock_fprog seccomp_prog;


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
	static const struct {
		const char *name;
		unsigned minor;
	} devs[] = {{"null", 3}, {"zero", 5}, {"full", 7}, {"random", 8}, {"urandom", 9}, {NULL, 0}};
	char p[4096];
	snprintf(p, sizeof p, "%s/dev", stage);
	if (mkdir(p, 0755) && errno != EEXIST)
		die("mkdir /dev");
	if (mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755"))
		die("mount /dev tmpfs");
	/* device nodes, not bind mounts: every mount is copied per run */
	for (int i = 0; devs[i].name; i++) {
		snprintf(p, sizeof p, "%s/dev/%s", stage, devs[i].name);
		if (mknod(p, S_IFCHR | 0666, makedev(1, devs[i].minor)) || chmod(p, 0666))
			die("mknod device");
	}
	static const char *links[][2] = {{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
		{"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"}, {"shm", "/w/shm"}, {NULL, NULL}};
	for (int i = 0; links[i][0]; i++) {
		snprintf(p, sizeof p, "%s/dev/%s", stage, links[i][0]);
		if (symlink(links[i][1], p))
			die("dev symlink");
	}
	snprintf(p, sizeof p, "%s/dev", stage);
	if (mount(NULL, p, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755"))
		die("remount /dev read-only");
}

/* judge_layout: the image already has the run's mount points (/w, /proc,
 * /dev) and /tmp -> /w/tmp, so its root can be one read-only bind mount. */
static int judge_layout(const char *rootfs)
{
	char p[4096], t[64];
	struct stat st;
	static const char *dirs[] = {"w", "proc", "dev", NULL};
	for (int i = 0; dirs[i]; i++) {
		snprintf(p, sizeof p, "%s/%s", rootfs, dirs[i]);
		if (lstat(p, &st) || !S_ISDIR(st.st_mode))
			return 0;
	}
	snprintf(p, sizeof p, "%s/tmp", rootfs);
	ssize_t n = readlink(p, t, sizeof t - 1);
	if (n < 0)
		return 0;
	t[n] = 0;
	return !strcmp(t, "/w/tmp") || !strcmp(t, "w/tmp");
}

static void build_root(const char *rootfs, const char *stage)
{
	char src[4096], dst[4096];
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
		die("make mounts private");
	if (judge_layout(rootfs)) {
		if (mount(rootfs, stage, NULL, MS_BIND, NULL))
			die("bind image root");
		make_dev(stage);
		if (mount(NULL, stage, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL))
			die("remount image root read-only");
		return;
	}
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

static void make_netns(void)
{
	for (int i = 0; i < nslots; i++) {
		if (unshare(CLONE_NEWNET))
			die("unshare network namespace");
		const char *step = loopback_up();
		if (step)
			die(step);
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
	static struct sock_filter prog[BPF_MAXINSNS_];
	int n = read_bpf(FD_SECCOMP, prog);
	if (n <= 0) {
		errno = n < 0 ? -n : EINVAL;
		die("seccomp program");
	}
	seccomp_prog.len = (unsigned short)n;
	seccomp_prog.filter = prog;
	close(FD_SECCOMP);
}

/* ---- per run ------------------------------------------------------------- */

/* mkdirs_for creates the missing parent directories of path, a path under
 * /w (H creates them with the run's file system uid and umask 0). */
static int mkdirs_for(const char *path)
{
	char p[4096];
	snprintf(p, sizeof p, "%s", path);
	for (char *s = p + 3; *s; s++) { /* "/w/" exists */
		if (*s != '/')
			continue;
		*s = 0;
		if (mkdir(p, 0755) && errno != EEXIST)
			return -1;
		*s = '/';
	}
	return 0;
}

/* copy_file copies src to dst, created with mode (umask 0) and owned by the
 * run's uid and gid (H's file system ids). */
static int copy_file(int src, const char *dst, mode_t mode)
{
	if (mkdirs_for(dst))
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
	return close(fd);
}

/* bind_file attaches tree, a detached read-only mount of one file (the
 * engine's open_tree of a cached program), at dst: the run reads and runs the
 * file in place and cannot change it (read-only mount, a mount point it
 * cannot unlink, no capability to unmount). */
static int bind_file(int tree, const char *dst)
{
	if (mkdirs_for(dst))
		return -1;
	int fd = open(dst, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0);
	if (fd < 0 || close(fd))
		return -1;
	return (int)syscall(SYS_move_mount, tree, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH_);
}

static void set_rl(int res, uint64_t soft, uint64_t hard)
{
	struct rlimit rl = {.rlim_cur = soft, .rlim_max = hard};
	syscall(SYS_prlimit64, 0, res, &rl, NULL);
}

/* A run in flight. H runs on its own stack in the zygote's address space
 * (CLONE_VM: no page-table copy, which is most of a fork's cost); everything
 * it reads lives here, allocated by the zygote before the clone and freed
 * after H was reaped. H must not call malloc, stdio or anything else holding
 * libc state; it uses the stack and system calls. */
struct run {
	/* the request's ID: 0 until H has its request (H stores it; the
	 * zygote reads it to kill and to report) */
	uint64_t id;
	pid_t pid;
	struct req r; /* at preparation: only slot, uid, gid, tmpfs_size, flags */
	char *msg;    /* MAX_MSG: the request as H received it */
	char **vec;   /* MAX_VEC */
	char **argv, **envp, **fnames;
	char *cwd;
	int fds[MAX_FILES + 3]; /* H's descriptors, received with the request */
	int nfds;
	/* a setup step of H that failed before H had its request */
	int prep_err;
	const char *prep_what;
	/* a kill for a request that H may have taken without storing its ID
	 * yet: reported as that request's end when H is reaped */
	uint64_t kill_id;
	/* H finished its setup and waits for its request (H stores it, the
	 * zygote reads it for STATUS) */
	int waiting;
	char *stack;
	/* P gives itself these CPUs back right before execve (H could not
	 * take the real-time window below); H and P share memory until then */
	int p_restores;
	cpu_set_t cpus;
};
#define MAX_RUNS (MAX_SLOTS * 2)
#define STACK_SIZE (256 * 1024)
static struct run runs[MAX_RUNS];
static struct run *ready[MAX_SLOTS]; /* the slot's H (prepared, or running a request it took) */
static struct req slot_params[MAX_SLOTS]; /* the namespace parameters of the slot's H */
static int slot_known[MAX_SLOTS];
/* the ID of the slot's last run that ended (was reported REAPED): a run's
 * request IDs grow per slot (the engine sends a slot's next request only
 * after the previous one's end), so a KILL for an ID up to it came late */
static uint64_t slot_ended[MAX_SLOTS];
static int fd_req0; /* the slots' request sockets: fd_req0 + slot */

static void setup_fail(uint64_t id, const char *what)
{
	evmsg(EV_SETUP_ERR, id, errno, what);
	syscall(SYS_exit, 125);
	for (;;)
		;
}

/* pass_gate waits for the engine's word on the slot's run (see the header):
 * 0 to run the program, -1 when the run was canceled before its request's
 * send returned. */
static int pass_gate(uint32_t *g)
{
	for (;;) {
		uint32_t v = __atomic_load_n(g, __ATOMIC_SEQ_CST);
		if (v == GATE_GO)
			return 0;
		if (v == GATE_ARMED) {
			if (!__atomic_compare_exchange_n(g, &v, GATE_WAITING, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
				continue;
		} else if (v != GATE_WAITING) {
			return -1;
		}
		syscall(SYS_futex, g, FUTEX_WAIT, GATE_WAITING, NULL, NULL, 0);
	}
}

/* P: from vfork to execve, still in H's memory and on H's stack. */
static void run_program(struct run *ru)
{
	struct req *r = &ru->r;
	uint64_t id = r->id;
	if (dup2(ru->fds[0], 0) < 0 || dup2(ru->fds[1], 1) < 0 || dup2(ru->fds[2], 2) < 0)
		setup_fail(id, "stdio");
	/* everything else is closed by execve */
	syscall(SYS_close_range, 3, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */);
	umask(run_umask);
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
	/* raw system calls: musl's set*id wrappers synchronise threads through
	 * libc state this process shares with the zygote */
	if (syscall(SYS_setgroups, 0, NULL) || syscall(SYS_setresgid, r->gid, r->gid, r->gid) ||
		syscall(SYS_setresuid, r->uid, r->uid, r->uid))
		setup_fail(id, "drop privileges");
	if (chdir(ru->cwd))
		setup_fail(id, "chdir");
	/* no_new_privs and the seccomp filter: inherited from H */
	if (pass_gate(&gates[r->slot])) {
		/* canceled: ends as a killed run that never started */
		syscall(SYS_kill, syscall(SYS_getpid), SIGKILL);
		syscall(SYS_exit, 137);
	}
	if (ru->p_restores)
		syscall(SYS_sched_setaffinity, 0, sizeof ru->cpus, &ru->cpus);
	int err = exec_path(ru->argv, ru->envp);
	errno = err;
	evmsg(EV_EXEC_ERR, id, err, ru->argv[0]);
	syscall(SYS_exit, 127);
}

static long long tnow(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000LL + t.tv_nsec / 1000;
}

#define TR() (tr[ntr++] = tracing ? tnow() : 0)

/* prep_fail: a setup step of H failed before its request arrived (the
 * zygote reports it if a request was handed over). */
static void prep_fail(struct run *ru, const char *what)
{
	ru->prep_err = errno;
	ru->prep_what = what;
	syscall(SYS_exit, 125);
	for (;;)
		;
}

static int same_sandbox(const struct req *a, const struct req *b)
{
	return a->slot == b->slot && a->uid == b->uid && a->gid == b->gid && a->tmpfs_size == b->tmpfs_size &&
		a->flags == b->flags;
}

static int parse_strings(struct run *ru, char *s, size_t n);

/* recv_request waits for H's request on the slot's socket: struct req, its
 * strings and the run's descriptors, sent by the engine. It returns the
 * request's ID (0: the socket is gone). A malformed request, or one for
 * another sandbox than H prepared, is a setup error of that request. */
static uint64_t recv_request(struct run *ru)
{
	char cbuf[CMSG_SPACE(sizeof(int) * (MAX_FILES + 3))];
	struct iovec iov = {.iov_base = ru->msg, .iov_len = MAX_MSG};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	ssize_t n;
	while ((n = recvmsg(fd_req0 + (int)ru->r.slot, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	if (n <= 0)
		return 0;
	ru->nfds = recv_fds(&mh, ru->fds, MAX_FILES + 3);
	if ((size_t)n < sizeof(struct req))
		return 0;
	struct req h;
	memcpy(&h, ru->msg, sizeof h);
	if (h.id == 0)
		return 0;
	__atomic_store_n(&ru->id, h.id, __ATOMIC_SEQ_CST);
	errno = EINVAL;
	if (h.op != OP_RUN || h.strbytes != (size_t)n - sizeof h || (mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC)))
		setup_fail(h.id, "malformed request");
	if (!same_sandbox(&h, &ru->r))
		setup_fail(h.id, "request for another sandbox");
	if (ru->nfds != 3 + (int)h.nfiles)
		setup_fail(h.id, "descriptors");
	ru->r = h;
	if (parse_strings(ru, ru->msg + sizeof h, h.strbytes))
		setup_fail(h.id, "malformed request");
	return h.id;
}

/* pin_here binds the caller to the CPU it runs on, saving its allowed CPUs
 * in allowed; 0 if it could not (then nothing changed). */
static int pin_here(cpu_set_t *allowed)
{
	unsigned cpu;
	if (syscall(SYS_getcpu, &cpu, NULL, NULL) || cpu >= CPU_SETSIZE)
		return 0;
	if (syscall(SYS_sched_getaffinity, 0, sizeof *allowed, allowed) < 0)
		return 0;
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	return syscall(SYS_sched_setaffinity, 0, sizeof one, &one) == 0;
}

/* to_fair puts a (real-time) H back to SCHED_OTHER: H is real-time only
 * while it waits for its program, and its exit, which tears down the pid
 * namespace, is not real-time work. 0: the caller. */
static void to_fair(pid_t h)
{
	struct sched_param other = {.sched_priority = 0};
	syscall(SYS_sched_setscheduler, h, SCHED_OTHER, &other);
}

/* kill_run kills a run's H (and with it its pid namespace). */
static void kill_run(pid_t h)
{
	to_fair(h);
	kill(h, SIGKILL);
}

/* H: PID 1 of the run's pid namespace. */
static int run_helper(void *arg)
{
	struct run *ru = arg;
	struct req *r = &ru->r;
	long long tr[16];
	volatile int ntr = 0; /* vfork below: -Wclobbered */
	TR();
	sigset_t all;
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* A session without a controlling terminal, apart from the zygote's,
	 * made here off the request path (see the header on autogroups). */
	if (syscall(SYS_setsid) < 0)
		prep_fail(ru, "setsid");
	if (unshare(CLONE_NEWNS | CLONE_NEWIPC))
		prep_fail(ru, "unshare mount, ipc");
	TR();
	if (setns(netfd[r->slot], CLONE_NEWNET))
		prep_fail(ru, "join network namespace");
	TR();
	for (int i = 0; i < ncg; i++) {
		int fd = FD_CG0 + (int)r->slot * ncg + i;
		if (write(fd, "0", 1) != 1)
			prep_fail(ru, "join cgroup");
	}
	TR();
	char opts[128];
	snprintf(opts, sizeof opts, "size=%llu,nr_inodes=16384,mode=0755,uid=%u,gid=%u",
		(unsigned long long)r->tmpfs_size, r->uid, r->gid);
	if (mount("tmpfs", "/w", "tmpfs", MS_NOSUID | MS_NODEV, opts))
		prep_fail(ru, "mount /w");
	if (mkdir("/w/tmp", 01777) || chmod("/w/tmp", 01777) || chown("/w/tmp", r->uid, r->gid))
		prep_fail(ru, "mkdir /w/tmp");
	if (r->flags & F_PROC) {
		if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL))
			prep_fail(ru, "mount /proc");
	}
	/* files H creates from here on: exactly the requested mode, owned by
	 * the run's uid and gid (no chown or chmod per file) */
	umask(0);
	syscall(SYS_setfsgid, r->gid);
	syscall(SYS_setfsuid, r->uid);
	if ((uid_t)syscall(SYS_setfsuid, -1) != r->uid || (gid_t)syscall(SYS_setfsgid, -1) != r->gid)
		prep_fail(ru, "file system ids");
	TR();
	/* From here on H and the program it forks run under the sandbox's
	 * seccomp filter (no mounts, no namespaces) and no_new_privs; with
	 * F_LATE_SECCOMP from when the request's files are in place. */
	const int late = (r->flags & F_LATE_SECCOMP) != 0;
	if (!late) {
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
			prep_fail(ru, "no_new_privs");
		if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &seccomp_prog))
			prep_fail(ru, "seccomp");
	}
	TR();
	__atomic_store_n(&ru->waiting, 1, __ATOMIC_SEQ_CST);
	uint64_t id = recv_request(ru);
	if (!id)
		syscall(SYS_exit, 0); /* no request: the slot was given up */
	TR();
	/* a file entry is "MODE:NAME" (copied) or "bMODE:NAME" (its descriptor
	 * is a detached mount, bind-mounted; only with F_LATE_SECCOMP) */
	for (uint32_t i = 0; i < r->nfiles; i++) {
		char *colon = strchr(ru->fnames[i], ':');
		if (!colon)
			setup_fail(id, "file entry");
		const int bind = ru->fnames[i][0] == 'b';
		mode_t mode = strtoul(ru->fnames[i] + bind, NULL, 8);
		char dst[4096];
		snprintf(dst, sizeof dst, "/w/%s", colon + 1);
		if (bind && (!late || bind_file(ru->fds[3 + i], dst)))
			setup_fail(id, "bind file");
		if (!bind && copy_file(ru->fds[3 + i], dst, mode))
			setup_fail(id, "write file");
		close(ru->fds[3 + i]);
	}
	if (late) {
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
			setup_fail(id, "no_new_privs");
		if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &seccomp_prog))
			setup_fail(id, "seccomp");
	}
	TR();
	/* vfork: H sleeps until P execs (or fails); no page tables are copied.
	 * P is created bound to H's CPU: H sleeps there right away, and P, in
	 * H's scheduler group, takes the CPU over. Left to fork balancing, P
	 * went to the other CPU, and with both cores busy waited there for the
	 * busy task's tick (1.7-2.3 ms per run); given its CPUs back before its
	 * execve, it was moved by exec balancing the same way. So P stays bound
	 * through execve and H gives P (and itself) every CPU back once P has
	 * exec'd, before P runs a single instruction of the program: from the
	 * vfork until it has reported P's exit H is real-time (SCHED_FIFO 1,
	 * reset on fork: P is created SCHED_OTHER and cannot become real-time
	 * without CAP_SYS_NICE), so the wakeup at P's exec preempts P before P
	 * returns to user space, and the one at P's exit runs H at once instead
	 * of after the busy task's tick. In that window H only sleeps, restores
	 * the CPUs, reaps (P, and orphans P made at its own cost) and sends the
	 * EXIT event; the pid namespace's teardown runs after it went back to
	 * SCHED_OTHER. Where H cannot be real-time, P gives itself its CPUs back
	 * right before execve (correct, but exec balancing may move it). A P
	 * that cannot have its CPUs back is killed: it would run on one CPU. */
	int pinned = pin_here(&ru->cpus);
	struct sched_param fifo = {.sched_priority = 1};
	int rt = pinned && syscall(SYS_sched_setscheduler, 0, SCHED_FIFO | SCHED_RESET_ON_FORK, &fifo) == 0;
	ru->p_restores = pinned && !rt;
	pid_t p = vfork();
	if (p < 0) {
		if (rt)
			to_fair(0);
		setup_fail(id, "fork program");
	}
	if (p == 0)
		run_program(ru);
	if (pinned) {
		if (syscall(SYS_sched_setaffinity, p, sizeof ru->cpus, &ru->cpus) && errno != ESRCH) {
			evmsg(EV_SETUP_ERR, id, errno, "affinity");
			kill(p, SIGKILL);
		}
		syscall(SYS_sched_setaffinity, 0, sizeof ru->cpus, &ru->cpus);
	}
	close(ru->fds[0]);
	close(ru->fds[1]);
	close(ru->fds[2]);
	/* reap until the program exits, then leave: the kernel kills and reaps
	 * whatever else is left in this pid namespace */
	for (;;) {
		int st;
		pid_t w = (pid_t)syscall(SYS_wait4, -1, &st, __WALL, NULL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			if (rt)
				to_fair(0);
			syscall(SYS_exit, 126);
		}
		if (w == p) {
			/* rusage of everything reaped so far: the program and the
			 * descendants it (or this helper) reaped */
			struct rusage u;
			syscall(SYS_getrusage, RUSAGE_CHILDREN, &u);
			struct ev e = {.kind = EV_EXIT, .id = id, .pid = p, .status = st,
				.utime_us = u.ru_utime.tv_sec * 1000000LL + u.ru_utime.tv_usec,
				.stime_us = u.ru_stime.tv_sec * 1000000LL + u.ru_stime.tv_usec,
				.maxrss_kb = u.ru_maxrss};
			send_ev(&e);
			if (rt)
				to_fair(0);
			TR();
			if (tracing) {
				char b[80];
				int o = 0;
				for (int i = 1; i < ntr && o < 70; i++)
					o += snprintf(b + o, sizeof b - o, "%lld ", tr[i] - tr[i - 1]);
				evmsg(7, id, 0, b);
			}
			syscall(SYS_exit, 0);
		}
	}
	return 0;
}

/* parse_strings splits the request's strings (in H, into ru->vec: no
 * malloc, H shares the zygote's memory). */
static int parse_strings(struct run *ru, char *s, size_t n)
{
	struct req *r = &ru->r;
	if (r->argc < 1 || r->argc > 4096 || r->envc > 4096 || r->nfiles > MAX_FILES || n == 0 || s[n - 1] != 0)
		return -1;
	char **out = ru->vec;
	char *p = s;
	size_t o = 0;
#define NEXT()                                  \
	do {                                    \
		if (p >= s + n)                 \
			return -1;              \
		out[o++] = p;                   \
		p += strlen(p) + 1;             \
	} while (0)
	ru->argv = out + o;
	for (uint32_t j = 0; j < r->argc; j++)
		NEXT();
	out[o++] = NULL;
	ru->envp = out + o;
	for (uint32_t j = 0; j < r->envc; j++)
		NEXT();
	out[o++] = NULL;
	ru->cwd = p;
	if (p >= s + n)
		return -1;
	p += strlen(p) + 1;
	ru->fnames = out + o;
	for (uint32_t j = 0; j < r->nfiles; j++)
		NEXT();
#undef NEXT
	return 0;
}

static struct run *free_slot_run(void)
{
	for (int i = 0; i < MAX_RUNS; i++)
		if (runs[i].pid == 0)
			return &runs[i];
	return NULL;
}

/* prepare clones the slot's H with its namespace parameters; H sets up its
 * sandbox and waits for a request on the slot's socket. NULL (errno set) on
 * failure. */
static struct run *prepare(int slot)
{
	struct run *ru = free_slot_run();
	if (!ru) {
		errno = EAGAIN;
		return NULL;
	}
	if (!ru->stack) {
		void *m = mmap(NULL, STACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
		if (m == MAP_FAILED)
			return NULL;
		ru->stack = m;
	}
	if (!ru->msg && !(ru->msg = malloc(MAX_MSG)))
		return NULL;
	if (!ru->vec && !(ru->vec = calloc(MAX_VEC, sizeof(char *))))
		return NULL;
	const struct req *p = &slot_params[slot];
	memset(&ru->r, 0, sizeof ru->r);
	ru->r.slot = p->slot;
	ru->r.uid = p->uid;
	ru->r.gid = p->gid;
	ru->r.tmpfs_size = p->tmpfs_size;
	ru->r.flags = p->flags;
	ru->id = 0;
	ru->kill_id = 0;
	ru->waiting = 0;
	ru->prep_err = 0;
	ru->prep_what = NULL;
	pid_t pid = clone(run_helper, ru->stack + STACK_SIZE, CLONE_VM | CLONE_NEWPID | SIGCHLD, ru);
	if (pid < 0)
		return NULL;
	ru->pid = pid;
	return ru;
}

/* send_end reports the end of the request id on slot (REAPED). */
static void send_end(int slot, uint64_t id, pid_t pid, int status, const struct rusage *u)
{
	if (id > slot_ended[slot])
		slot_ended[slot] = id;

	struct ev e = {.kind = EV_REAPED, .id = id, .pid = pid, .status = status};
	if (u) {
		e.utime_us = u->ru_utime.tv_sec * 1000000LL + u->ru_utime.tv_usec;
		e.stime_us = u->ru_stime.tv_sec * 1000000LL + u->ru_stime.tv_usec;
		e.maxrss_kb = u->ru_maxrss;
	}
	send_ev(&e);
}

/* take_queued takes a request no H will run off the slot's socket, closes
 * its descriptors and returns its ID (0: none was queued). */
static uint64_t take_queued(int slot)
{
	char buf[sizeof(struct req)];
	char cbuf[CMSG_SPACE(sizeof(int) * (MAX_FILES + 3))];
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	ssize_t n = recvmsg(fd_req0 + slot, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return 0;
	int fds[MAX_FILES + 3];
	for (int i = recv_fds(&mh, fds, MAX_FILES + 3); i > 0; i--)
		close(fds[i - 1]);
	struct req r;
	if ((size_t)n < sizeof r)
		return 0;
	memcpy(&r, buf, sizeof r);
	return r.id;
}

/* fail_queued answers a queued request that no H could take. */
static void fail_queued(int slot, int err, const char *what)
{
	uint64_t id = take_queued(slot);
	if (!id)
		return;
	evmsg(EV_SETUP_ERR, id, err, what);
	send_end(slot, id, 0, 125 << 8, NULL);
}

static int queued(int slot)
{
	struct pollfd p = {.fd = fd_req0 + slot, .events = POLLIN};
	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/* discard kills the slot's prepared H and waits for it: its pid must not
 * count in the slot's pids cgroup while the next H starts. */
static void discard(int slot)
{
	struct run *ru = ready[slot];
	if (!ru)
		return;
	ready[slot] = NULL;
	kill_run(ru->pid);
	int st;
	while (wait4(ru->pid, &st, __WALL, NULL) < 0 && errno == EINTR)
		;
	ru->pid = 0;
}

/* handle_prepare: the engine's next request on a slot needs other namespace
 * parameters (or the slot's first): replace its H. */
static void handle_prepare(struct req *r)
{
	if (r->slot >= (uint32_t)nslots) {
		evmsg(EV_SETUP_ERR, r->id, EINVAL, "malformed request");
		return;
	}
	int slot = (int)r->slot;
	discard(slot);
	slot_params[slot] = *r;
	slot_known[slot] = 1;
	ready[slot] = prepare(slot); /* on failure the request finds no H: see main */
	struct ev e = {.kind = EV_PREPARED, .id = r->id};
	send_ev(&e);
}

/* handle_status answers STATUS with the number of helpers that are not
 * idle: running a request, being set up, or ended and not yet reaped (the
 * engine waits for 0 to measure something else on a quiet machine). A slot
 * whose helper could not be set up has none and counts as idle. */
static void handle_status(struct req *r)
{
	int busy = 0;
	for (int i = 0; i < MAX_RUNS; i++) {
		struct run *ru = &runs[i];
		if (!ru->pid)
			continue;
		int idle = ready[ru->r.slot] == ru && __atomic_load_n(&ru->waiting, __ATOMIC_SEQ_CST) &&
			!__atomic_load_n(&ru->id, __ATOMIC_SEQ_CST);
		busy += !idle;
	}
	struct ev e = {.kind = EV_STATUS, .id = r->id, .pid = busy};
	send_ev(&e);
}

static void handle_kill(struct req *r)
{
	for (int i = 0; i < MAX_RUNS; i++)
		if (runs[i].pid && __atomic_load_n(&runs[i].id, __ATOMIC_SEQ_CST) == r->id) {
			kill_run(runs[i].pid);
			return;
		}
	if (r->slot >= (uint32_t)nslots)
		return;
	int slot = (int)r->slot;
	/* the run ended before its kill came (its H was reaped, or its request
	 * dropped): the slot's H and queue belong to later runs */
	if (r->id <= slot_ended[slot])
		return;
	/* still queued: nobody runs it */
	uint64_t q;
	while ((q = take_queued(slot)) != 0)
		if (q == r->id) {
			send_end(slot, r->id, 0, SIGKILL, NULL);
			return;
		}
	/* the slot's H took it and has not stored its ID yet */
	struct run *ru = ready[slot];
	if (ru) {
		ru->kill_id = r->id;
		kill_run(ru->pid);
	}
}

static void reap(void)
{
	for (;;) {
		int st;
		struct rusage u;
		pid_t w = wait4(-1, &st, WNOHANG | __WALL, &u);
		if (w <= 0)
			return;
		for (int i = 0; i < MAX_RUNS; i++) {
			struct run *ru = &runs[i];
			if (ru->pid != w)
				continue;
			int slot = (int)ru->r.slot;
			if (ready[slot] == ru)
				ready[slot] = NULL;
			uint64_t id = __atomic_load_n(&ru->id, __ATOMIC_SEQ_CST);
			ru->pid = 0;
			if (id) {
				send_end(slot, id, w, st, &u);
			} else if (ru->kill_id) {
				send_end(slot, ru->kill_id, w, st, &u);
			} else if (ru->prep_what && queued(slot)) {
				/* H could not set up: the request waiting for it fails */
				fail_queued(slot, ru->prep_err, ru->prep_what);
			}
			/* prepare the slot's next run while nobody waits for it */
			if (!ru->prep_what && slot_known[slot] && !ready[slot])
				ready[slot] = prepare(slot);
			break;
		}
	}
}

static char msgbuf[4096]; /* control requests: no strings */

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
	tracing = getenv("DSEC_FNCALL_TRACE") != NULL;
	run_umask = umask(022);
	umask(run_umask);
	fd_req0 = FD_CG0 + nslots * ncg;
	for (int i = 0; i < nslots; i++)
		fcntl(fd_req0 + i, F_SETFD, FD_CLOEXEC);
	void *g = mmap(NULL, GATES_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd_req0 + nslots, 0);
	if (g == MAP_FAILED)
		die("map run gates");
	gates = g;
	close(fd_req0 + nslots);
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
	struct ev hello = {.kind = EV_STARTED, .id = 0, .pid = getpid()};
	send_ev(&hello);

	for (;;) {
		/* the sockets of slots without H: a request there needs a fresh one */
		struct pollfd pfd[2 + MAX_SLOTS] = {{.fd = FD_CTL, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
		int slotof[2 + MAX_SLOTS];
		int np = 2;
		for (int sl = 0; sl < nslots; sl++)
			if (!ready[sl]) {
				slotof[np] = sl;
				pfd[np++] = (struct pollfd){.fd = fd_req0 + sl, .events = POLLIN};
			}
		if (poll(pfd, np, -1) < 0) {
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
		for (int k = 2; k < np; k++) {
			int sl = slotof[k];
			if (!pfd[k].revents || ready[sl])
				continue;
			if (slot_known[sl] && (ready[sl] = prepare(sl)))
				continue;
			fail_queued(sl, errno ? errno : EINVAL, slot_known[sl] ? "clone" : "slot not prepared");
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
			for (int i = 0; i < MAX_RUNS; i++)
				if (runs[i].pid)
					kill_run(runs[i].pid);
			return 0;
		}
		int fds[MAX_FILES + 3]; /* the control socket carries none */
		for (int i = recv_fds(&mh, fds, MAX_FILES + 3); i > 0; i--)
			close(fds[i - 1]);
		if ((size_t)n >= sizeof(struct req)) {
			struct req r;
			memcpy(&r, msgbuf, sizeof r);
			if (r.op == OP_PREPARE)
				handle_prepare(&r);
			else if (r.op == OP_KILL)
				handle_kill(&r);
			else if (r.op == OP_STATUS)
				handle_status(&r);
			else
				evmsg(EV_SETUP_ERR, r.id, EINVAL, "malformed request");
		}
	}
}

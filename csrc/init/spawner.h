/*
 * spawner: `dsec-init spawner`, a tiny long-lived helper that clones sandbox
 * inits for the server (internal/backend/initproto/spawner.go).
 *
 * Why: the server holds a descriptor per live sandbox (its pidfd), and a
 * fork+exec from the server copies its whole descriptor table and then closes
 * every close-on-exec entry again at exec: O(live sandboxes) per create. This
 * process has four descriptors; the server sends it the new init's fds and it
 * clones with CLONE_PARENT, so the init is still the server's child (the
 * server reaps it and gets its SIGCHLD) but was copied from a tiny table.
 *
 * Protocol on fd 3 (SOCK_SEQPACKET): a request is struct spawn_req plus the
 * init's fds as SCM_RIGHTS, one per bit set in mask, in fd order (with bit
 * SPAWN_CGROUP_BIT, a cgroup v2 directory last: the init is cloned into it
 * with clone3, as the server would on a cgroup v2 host); the answer
 * is struct spawn_ans: the pid, or clone's errno. It is sent right after the
 * clone, so the child's exec overlaps the server's next steps (the config
 * write, the cgroup join); a child that cannot set up its fds or exec writes
 * "ERR spawn: STEP: ERROR" on its status pipe (fd 5 of the layout, where the
 * server reads the init's setup outcome anyway) and exits 127. EOF on fd 3:
 * the server is gone, exit.
 *
 * Network namespaces: a request for CLONE_NEWNET takes a namespace made
 * before, while the helper was idle (net_refill: at most NET_POOL, made
 * with unshare and left again with setns): the helper enters it, clones
 * without CLONE_NEWNET and goes back to its own. Making one is the dearest
 * part of the clone (about 0.3 ms). A helper that cannot make them clones
 * with CLONE_NEWNET as before.
 *
 * Template: `dsec-init spawner DIR` first moves into a mount namespace of its
 * own whose root is an empty read-only tmpfs (mounted on DIR, which must
 * exist, then pivoted into) holding two directories, root and rw, and
 * nothing of the host. Inits cloned from it copy that namespace (two mounts,
 * not the host's table), get their layers as fds and switch roots without
 * pivot_root (dsec-init.c, switch_root); it runs its own binary through an
 * fd taken before. Its first packet on fd 3 is one byte: 'T' with the
 * template, 'P' without (the setup failed: it spawns from the host's
 * namespace as before, exec'ing the request's path).
 */
/* struct spawn_req and struct spawn_ans: csrc/common/wire.h */

/* spawn_exe is the spawner's own binary (O_PATH, above the init's fd range)
 * in template mode; -1 otherwise. */
static int spawn_exe = -1;

/* spawner_template moves this process into the template namespace; on
 * failure it is back in the one it started in. */
static int spawner_template(const char *dir)
{
	int exe = open("/proc/self/exe", O_PATH | O_CLOEXEC);
	int old = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
	int hi = exe < 0 ? -1 : fcntl(exe, F_DUPFD_CLOEXEC, 100);
	if (exe >= 0)
		close(exe);
	if (hi < 0 || old < 0 || unshare(CLONE_NEWNS))
		goto fail;
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
	    mount("dsec-template", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=16k,mode=0755") ||
	    chdir(dir) || mkdir("root", 0755) || mkdir("rw", 0700) ||
	    syscall(SYS_pivot_root, ".", ".") || umount2(".", MNT_DETACH) || chdir("/") ||
	    mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)) {
		if (setns(old, CLONE_NEWNS) || chdir("/"))
			_exit(1); /* neither namespace is usable */
		goto fail;
	}
	close(old);
	spawn_exe = hi;
	return 0;
fail:
	if (hi >= 0)
		close(hi);
	if (old >= 0)
		close(old);
	return -1;
}

static void __attribute__((noreturn)) spawn_child(const struct spawn_req *rq, const int *fds)
{
	/* an error goes to the status pipe: first where it was received,
	 * then through its copy above the target range */
	int status = fds[FD_STATUS];
	const char *step = "fds";
	/* move everything above the target range first, then into place */
	int hi[SPAWN_MAXFD];
	for (int i = 0; i < SPAWN_MAXFD; i++)
		hi[i] = -1;
	for (int i = 0; i < SPAWN_MAXFD; i++) {
		if (fds[i] >= 0 && (hi[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 64)) < 0)
			goto fail;
	}
	status = hi[FD_STATUS];
	for (int i = 0; i < SPAWN_MAXFD; i++) {
		if (hi[i] < 0)
			continue;
		if (dup2(hi[i], i) < 0) /* dup2 clears close-on-exec */
			goto fail;
	}
	for (int i = 0; i < SPAWN_MAXFD; i++)
		if (hi[i] < 0 && i >= 3) /* an absent fd must stay closed (fd 7) */
			close(i);
	syscall(SYS_close_range, SPAWN_MAXFD, 63, 0);
	step = "setsid";
	if (setsid() < 0)
		goto fail;
	char *argv[] = {"dsec-init", NULL};
	char *envp[] = {NULL};
	step = "exec";
	if (spawn_exe >= 0)
		syscall(SYS_execveat, spawn_exe, "", argv, envp, AT_EMPTY_PATH);
	else
		execve(rq->path, argv, envp);
fail:;
	int e = errno;
	if (status >= 0) {
		char buf[256];
		int n = snprintf(buf, sizeof buf, "ERR spawn: %s %s: %s\n", step,
				 spawn_exe >= 0 ? "(the spawner's binary)" : rq->path, strerror(e));
		if (n > (int)sizeof buf - 1)
			n = sizeof buf - 1;
		(void)!write(status, buf, n);
	}
	_exit(127);
}

#define NET_POOL 4
static int net_pool[NET_POOL], net_pooled;
/* the helper's own network namespace, and its /proc/PID/ns (opened before
 * the template, which has no /proc); -1: no pool */
static int net_home = -1, net_nsdir = -1;

static void net_pool_off(void)
{
	if (net_nsdir >= 0)
		close(net_nsdir);
	net_nsdir = -1;
}

/* net_refill makes network namespaces for the pool until it is full or a
 * request waits on fd 3. */
static void net_refill(void)
{
	while (net_nsdir >= 0 && net_pooled < NET_POOL) {
		struct pollfd p = {.fd = 3, .events = POLLIN};
		if (poll(&p, 1, 0) != 0)
			return;
		if (unshare(CLONE_NEWNET)) {
			net_pool_off();
			return;
		}
		int fd = openat(net_nsdir, "net", O_RDONLY | O_CLOEXEC);
		if (setns(net_home, CLONE_NEWNET))
			_exit(1); /* stranded in another namespace: the server falls back */
		if (fd < 0) {
			net_pool_off();
			return;
		}
		net_pool[net_pooled++] = fd;
	}
}

static int spawner_main(const char *dir)
{
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGCHLD, SIG_DFL);
	net_home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	net_nsdir = open("/proc/self/ns", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (net_home < 0)
		net_pool_off();
	if (dir) {
		char mode = spawner_template(dir) ? 'P' : 'T';
		if (write(3, &mode, 1) != 1)
			_exit(0);
	}
	static struct spawn_req rq;
	for (;;) {
		net_refill();
		char cbuf[CMSG_SPACE(sizeof(int) * (SPAWN_MAXFD + 1))];
		struct iovec iov = {&rq, sizeof rq};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
		memset(&rq, 0, sizeof rq);
		ssize_t n = recvmsg(3, &mh, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			_exit(0);
		int got[SPAWN_MAXFD + 1];
		int ngot = recv_fds(&mh, got, SPAWN_MAXFD + 1);
		struct spawn_ans ans = {0, 0};
		int fds[SPAWN_MAXFD], want = 0, cgroup = -1;
		for (int i = 0; i < SPAWN_MAXFD; i++) {
			fds[i] = -1;
			if (rq.mask & (1u << i))
				fds[i] = want < ngot ? got[want] : -1, want++;
		}
		if (rq.mask & (1u << SPAWN_CGROUP_BIT))
			cgroup = want < ngot ? got[want] : -1, want++;
		if ((size_t)n != sizeof rq || want != ngot || rq.path[sizeof rq.path - 1] != 0 ||
		    (rq.mask >> (SPAWN_CGROUP_BIT + 1)) ||
		    (rq.flags & ~(uint32_t)(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET)))
			ans.err = EINVAL;
		if (!ans.err) {
			/* a child that fails later exits by itself, and the
			 * server, its parent, reaps it. CLONE_PARENT: the child's
			 * exit signal is this process's own (SIGCHLD), so clone3's
			 * exit_signal stays 0. */
			long pid;
			uint64_t flags = rq.flags | CLONE_PARENT;
			int net = -1;
			if ((flags & CLONE_NEWNET) && net_pooled > 0) {
				net = net_pool[--net_pooled];
				if (setns(net, CLONE_NEWNET) == 0) {
					flags &= ~(uint64_t)CLONE_NEWNET;
				} else {
					close(net);
					net = -1;
				}
			}
			if (cgroup >= 0) {
				struct clone_args_ ca;
				memset(&ca, 0, sizeof ca);
				ca.flags = flags | CLONE_INTO_CGROUP_;
				ca.cgroup = (uint64_t)cgroup;
				pid = syscall(SYS_clone3, &ca, sizeof ca);
			} else {
				pid = syscall(SYS_clone, (unsigned long)flags, NULL, NULL, NULL, NULL);
			}
			if (pid != 0 && net >= 0) {
				int e = errno;
				if (setns(net_home, CLONE_NEWNET))
					_exit(1);
				close(net);
				errno = e;
			}
			if (pid == 0)
				spawn_child(&rq, fds);
			if (pid < 0)
				ans.err = errno;
			else
				ans.pid = (int32_t)pid;
		}
		for (int i = 0; i < ngot; i++)
			close(got[i]);
		if (write(3, &ans, sizeof ans) != sizeof ans)
			_exit(0);
	}
}

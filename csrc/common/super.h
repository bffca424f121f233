/*
 * super.h: child supervision shared by dsec's two supervisors, the container
 * init (csrc/init) and the microVM guest agent (csrc/vmagent): the steps a
 * child of EXEC takes from fork to execve, what a failed step is called on
 * the wire, reaping and the EXITED reply. The request side is proto.h.
 */
#ifndef DSEC_COMMON_SUPER_H
#define DSEC_COMMON_SUPER_H

#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "proto.h"
#include "sys.h"

/* The steps of exec_steps, named in an ERROR reply's step= field (which
 * marks a process that could not be started; "exec" with ENOENT is exit
 * code 127, every other step 126). */
enum { STEP_SETSID, STEP_DUP2, STEP_CTTY, STEP_GROUPS, STEP_GID, STEP_UID, STEP_CHDIR, STEP_EXEC, NSTEPS };
static const char *const step_names[NSTEPS] = {"setsid",    "dup2",      "ioctl TIOCSCTTY", "setgroups",
					       "setresgid", "setresuid", "chdir",           "exec"};

/* exec_steps runs in the child of an EXEC: a new session, fds 0-2 from fds
 * (with tty=1 a terminal's slave, which becomes the controlling terminal),
 * the groups, gid and uid of r, its working directory, then the program.
 * It returns only on failure: the step that failed, with errno set. Raw
 * system calls only: the child may share the agent's memory (vfork). */
static inline int exec_steps(const struct exec_req *r, const int fds[3])
{
	if (syscall(SYS_setsid) < 0)
		return STEP_SETSID;
	for (int i = 0; i < 3; i++)
		if (syscall(SYS_dup2, fds[i], i) < 0)
			return STEP_DUP2;
	if (r->tty && syscall(SYS_ioctl, 0, TIOCSCTTY, 0) < 0)
		return STEP_CTTY;
	/* raw: musl's set*id wrappers synchronise all threads through libc
	 * state, which a vfork child must not touch */
	if (syscall(SYS_setgroups, r->ngroups, r->groups) < 0)
		return STEP_GROUPS;
	if (syscall(SYS_setresgid, (gid_t)r->gid, (gid_t)r->gid, (gid_t)r->gid) < 0)
		return STEP_GID;
	if (syscall(SYS_setresuid, (uid_t)r->uid, (uid_t)r->uid, (uid_t)r->uid) < 0)
		return STEP_UID;
	if (syscall(SYS_chdir, r->cwd ? r->cwd : "/") < 0)
		return STEP_CHDIR;
	errno = exec_path(r->argv, r->envp);
	return STEP_EXEC;
}

/* exit_rec is how a reaped child ended. */
struct exit_rec {
	int status; /* wait status */
	long long utime_us, stime_us, maxrss_kb;
};

/* reap_next reaps one exited child (any: PID 1 reaps orphans too) without
 * blocking: its pid and how it ended, or 0 when none is left. */
static inline pid_t reap_next(struct exit_rec *e)
{
	struct rusage ru;
	int status;
	pid_t pid = wait4(-1, &status, WNOHANG, &ru);
	if (pid <= 0)
		return 0;
	e->status = status;
	e->utime_us = (long long)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec;
	e->stime_us = (long long)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec;
	e->maxrss_kb = ru.ru_maxrss;
	return pid;
}

/* out_exited builds the EXITED reply of pid. */
static inline struct out *out_exited(pid_t pid, const struct exit_rec *e)
{
	struct out *o = out_begin("EXITED");
	out_add(o, "pid=%d", (int)pid);
	out_add(o, "status=%d", e->status);
	out_add(o, "utime_us=%lld", e->utime_us);
	out_add(o, "stime_us=%lld", e->stime_us);
	out_add(o, "maxrss_kb=%lld", e->maxrss_kb);
	return o;
}

/* out_ps_entry adds a PS entry to o; when it would not fit, send(ctx, o)
 * gets the packet so far (marked more=1) and o starts over. */
static inline void out_ps_entry(struct out *o, const char *tag, pid_t pid, int running,
				void (*send)(void *ctx, struct out *o), void *ctx)
{
	if (!out_room(o, strlen(tag) + 48)) {
		out_add(o, "more=1");
		send(ctx, o);
		out_begin("PS");
	}
	out_add(o, "proc=%s:%d:%d", tag, (int)pid, running);
}

#endif /* DSEC_COMMON_SUPER_H */

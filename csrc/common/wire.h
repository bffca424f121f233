/*
 * wire.h: every fixed-layout structure that dsec's C programs exchange with
 * the Go node or the kernel, with its size and field offsets asserted at
 * compile time. internal/backend/initproto's TestWireLayout reads the WIRE_SIZE,
 * WIRE_OFFSET and WIRE_CONST lines below and checks them against the Go
 * encoders (internal/backend/initproto/spawner.go, internal/backend/fncall/zygote.go,
 * internal/backend/vm/guest/client.go), so the two sides cannot drift: change a
 * struct here and the compiler or that test tells you what else to change.
 *
 * All numbers are little-endian on the wire (the node and its sandboxes run
 * on one machine, or a guest of the same architecture).
 */
#ifndef DSEC_COMMON_WIRE_H
#define DSEC_COMMON_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define WIRE_SIZE(type, n) _Static_assert(sizeof(type) == (n), "size of " #type)
#define WIRE_OFFSET(type, field, n) _Static_assert(offsetof(type, field) == (n), "offset of " #type "." #field)
#define WIRE_CONST(name, n) _Static_assert((name) == (n), "value of " #name)

/* ---- kernel ABI (musl ships no linux/ headers) ---- */

/* struct sock_filter: one classic BPF instruction of a seccomp program. */
struct sock_filter {
	uint16_t code;
	uint8_t jt, jf;
	uint32_t k;
};
struct sock_fprog {
	unsigned short len;
	struct sock_filter *filter;
};
#define BPF_MAXINSNS_ 4096
WIRE_SIZE(struct sock_filter, 8);

/* ---- the init's spawner (csrc/init/spawner.h, internal/backend/initproto/spawner.go) ---- */

#define SPAWN_MAXFD 8
#define SPAWN_PATH_MAX 4096
/* mask bit SPAWN_CGROUP_BIT: one more fd follows the init's, a cgroup v2
 * directory the init is cloned into (clone3's CLONE_INTO_CGROUP) */
#define SPAWN_CGROUP_BIT 8
struct spawn_req {
	uint32_t flags;              /* clone namespace flags */
	uint32_t mask;               /* bit i: fd i of the init is attached */
	char path[SPAWN_PATH_MAX];   /* NUL-terminated */
};
/* clone3's argument (CLONE_ARGS_SIZE_VER2) and its CLONE_INTO_CGROUP flag */
struct clone_args_ {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
	uint64_t set_tid, set_tid_size, cgroup;
};
#define CLONE_INTO_CGROUP_ 0x200000000ULL
struct spawn_ans {
	int32_t pid;
	int32_t err;
};
WIRE_CONST(SPAWN_PATH_MAX, 4096);
WIRE_CONST(SPAWN_CGROUP_BIT, 8);
WIRE_SIZE(struct clone_args_, 88);
WIRE_OFFSET(struct clone_args_, cgroup, 80);
WIRE_SIZE(struct spawn_req, 4104);
WIRE_OFFSET(struct spawn_req, flags, 0);
WIRE_OFFSET(struct spawn_req, mask, 4);
WIRE_OFFSET(struct spawn_req, path, 8);
WIRE_SIZE(struct spawn_ans, 8);
WIRE_OFFSET(struct spawn_ans, pid, 0);
WIRE_OFFSET(struct spawn_ans, err, 4);

/* ---- the FnCall zygote (csrc/fncall, internal/backend/fncall/zygote.go) ---- */

#define FNCALL_MAX_FILES 64
#define FNCALL_MAX_MSG (256 * 1024)
WIRE_CONST(FNCALL_MAX_FILES, 64);
WIRE_CONST(FNCALL_MAX_MSG, 262144);

/* struct req: a control request, or a RUN request followed by its strings */
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
WIRE_SIZE(struct req, 96);
WIRE_OFFSET(struct req, op, 0);
WIRE_OFFSET(struct req, slot, 4);
WIRE_OFFSET(struct req, id, 8);
WIRE_OFFSET(struct req, uid, 16);
WIRE_OFFSET(struct req, gid, 20);
WIRE_OFFSET(struct req, flags, 24);
WIRE_OFFSET(struct req, nfiles, 28);
WIRE_OFFSET(struct req, rl_cpu, 32);
WIRE_OFFSET(struct req, rl_fsize, 40);
WIRE_OFFSET(struct req, rl_nproc, 48);
WIRE_OFFSET(struct req, rl_nofile, 56);
WIRE_OFFSET(struct req, rl_stack, 64);
WIRE_OFFSET(struct req, tmpfs_size, 72);
WIRE_OFFSET(struct req, argc, 80);
WIRE_OFFSET(struct req, envc, 84);
WIRE_OFFSET(struct req, strbytes, 88);

/* struct ev: an event of the zygote or a helper */
struct ev {
	uint32_t kind;
	int32_t err;
	uint64_t id;
	int32_t pid;
	int32_t status;
	int64_t utime_us, stime_us, maxrss_kb;
	char msg[80];
};
WIRE_SIZE(struct ev, 128);
WIRE_OFFSET(struct ev, kind, 0);
WIRE_OFFSET(struct ev, err, 4);
WIRE_OFFSET(struct ev, id, 8);
WIRE_OFFSET(struct ev, pid, 16);
WIRE_OFFSET(struct ev, status, 20);
WIRE_OFFSET(struct ev, utime_us, 24);
WIRE_OFFSET(struct ev, stime_us, 32);
WIRE_OFFSET(struct ev, maxrss_kb, 40);
WIRE_OFFSET(struct ev, msg, 48);

/* ---- the microVM agent's port (csrc/vmagent, internal/backend/vm/guest) ---- */

/* A frame is this header and len payload bytes. The agent reads and writes
 * it byte by byte (no alignment needed); the struct documents the layout. */
#define FRAME_MAGIC 0xD5EC
#define FRAME_MAX (256 * 1024) /* largest payload */
#define FRAME_CHUNK (32 * 1024) /* stream data per frame */
struct frame_hdr {
	uint8_t magic[2]; /* FRAME_MAGIC, little-endian */
	uint8_t type;     /* T_HELLO ... T_CLOSE */
	uint8_t stream;   /* 1 stdout, 2 stderr */
	uint8_t channel[4];
	uint8_t len[4];
};
WIRE_SIZE(struct frame_hdr, 12);
WIRE_OFFSET(struct frame_hdr, type, 2);
WIRE_OFFSET(struct frame_hdr, stream, 3);
WIRE_OFFSET(struct frame_hdr, channel, 4);
WIRE_OFFSET(struct frame_hdr, len, 8);
WIRE_CONST(FRAME_MAGIC, 0xD5EC);
WIRE_CONST(FRAME_MAX, 262144);
WIRE_CONST(FRAME_CHUNK, 32768);

#endif /* DSEC_COMMON_WIRE_H */

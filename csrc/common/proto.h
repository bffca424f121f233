/*
 * proto.h: the control protocol of dsec's two supervisors, the container
 * init (csrc/init) and the microVM guest agent (csrc/vmagent): a packet is a
 * list of NUL-terminated strings, the op first, then key=value fields (see
 * internal/backend/initproto). Here: splitting and reading a request, the EXEC
 * request's parser with every field check (both agents use it, and
 * csrc/fuzz/exec_parse_fuzz.c fuzzes it), and building replies. The child
 * side of EXEC is csrc/common/super.h. Header-only (static functions) so
 * each agent stays one translation unit (csrc/build.sh).
 */
#ifndef DSEC_PROTO_H
#define DSEC_PROTO_H

#include <errno.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define MAX_FIELDS 65536 /* strings per request */
#define MAX_TAG 4096     /* longest tag */
#define MAX_GROUPS 256   /* supplementary groups of an EXEC */
#define REPLY_MAX (64 * 1024) /* largest reply packet (PS and LIST are chunked) */

/* parse_uint parses a decimal number no larger than max. */
static inline int parse_uint(const char *s, unsigned long long max, unsigned long long *out)
{
	char *end;
	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || v > max)
		return -1;
	*out = v;
	return 0;
}

/* field returns the value of key in fields f[1..nf), or NULL. */
static inline const char *field(char **f, int nf, const char *key)
{
	size_t kl = strlen(key);
	for (int i = 1; i < nf; i++)
		if (!strncmp(f[i], key, kl) && f[i][kl] == '=')
			return f[i] + kl + 1;
	return NULL;
}

/* split_fields splits a packet of n > 0 bytes ending in NUL into its strings
 * (f has MAX_FIELDS entries); -1 if there are more than MAX_FIELDS. */
static inline int split_fields(char *buf, ssize_t n, char **f)
{
	int nf = 0;
	for (char *p = buf; p < buf + n; p += strlen(p) + 1) {
		if (nf == MAX_FIELDS)
			return -1;
		f[nf++] = p;
	}
	return nf;
}

/* parse_sig returns the "sig" field as a signal number, or -1. */
static inline int parse_sig(char **f, int nf)
{
	const char *v = field(f, nf, "sig");
	unsigned long long sig;
	if (!v || parse_uint(v, NSIG - 1, &sig))
		return -1;
	return (int)sig;
}

/* ---- the EXEC request ---- */

/* exec_req is a parsed EXEC request; the strings point into the packet. */
struct exec_req {
	char **argv, **envp; /* NULL-terminated, in the caller's vector */
	const char *cwd;     /* NULL: "/" */
	const char *tag;     /* NULL: untagged */
	const char *log[2];  /* EXEC_LOGS: a tagged process's log files (opaque) */
	unsigned long long uid, gid, tty, cols, rows; /* cols, rows: EXEC_TTYSIZE */
	unsigned long long outcap; /* >0: cap each output stream at this many bytes */
	gid_t groups[MAX_GROUPS];
	int ngroups;
	const char *err; /* parse_exec's message when it fails */
};

/* The optional fields an agent takes besides the common ones. */
enum {
	EXEC_TTYSIZE = 1, /* cols=, rows= (the agent opens the terminal) */
	EXEC_LOGS = 2,    /* log1=, log2= (kept with a tagged process) */
};

/* parse_groups parses "G1,G2,..." (at most MAX_GROUPS decimal gids). */
static inline int parse_groups(const char *v, gid_t *g, int *n)
{
	char num[16];
	*n = 0;
	while (*v) {
		size_t l = strcspn(v, ",");
		unsigned long long u;
		if (*n == MAX_GROUPS || l == 0 || l >= sizeof num)
			return -1;
		memcpy(num, v, l);
		num[l] = 0;
		if (parse_uint(num, 0xfffffffeULL, &u))
			return -1;
		g[(*n)++] = (gid_t)u;
		v += l;
		if (*v == ',' && !*++v)
			return -1; /* a trailing comma */
	}
	return 0;
}

/* parse_exec parses EXEC's fields f[1..nf) into r. vec holds at least nf + 2
 * entries: argv and envp are built there. allow is a set of EXEC_* for the
 * optional fields this agent takes; any other field is refused, like a
 * field without '=', a bad number or tag, no arg at all, or an output cap
 * with a terminal. Returns 0, or EINVAL with r->err set. A field given
 * twice takes its last value. */
static inline int parse_exec(char **f, int nf, char **vec, unsigned allow, struct exec_req *r)
{
	int nargs = 0, nenv = 0;
	memset(r, 0, sizeof *r);
	r->cols = 80; /* a terminal's size when EXEC gives none */
	r->rows = 24;
	/* args first, then env: count to place envp */
	for (int i = 1; i < nf; i++)
		if (!strncmp(f[i], "arg=", 4))
			nargs++;
	r->argv = vec;
	r->envp = vec + nargs + 1;
	nargs = 0;
	for (int i = 1; i < nf; i++) {
		const char *k = f[i], *v = strchr(k, '=');
		if (!v) {
			r->err = "field without '='";
			return EINVAL;
		}
		size_t kl = (size_t)(v - k);
		v++;
#define KEY(s) (kl == sizeof(s) - 1 && !memcmp(k, s, kl))
		if (KEY("arg"))
			r->argv[nargs++] = (char *)v;
		else if (KEY("env"))
			r->envp[nenv++] = (char *)v;
		else if (KEY("cwd"))
			r->cwd = *v ? v : NULL;
		else if (KEY("tag")) {
			if (strlen(v) > MAX_TAG) {
				r->err = "tag too long";
				return EINVAL;
			}
			r->tag = *v ? v : NULL;
		} else if (KEY("groups")) {
			if (parse_groups(v, r->groups, &r->ngroups)) {
				r->err = "bad groups";
				return EINVAL;
			}
		} else if (KEY("outcap")) {
			if (parse_uint(v, 1ULL << 50, &r->outcap)) {
				r->err = "bad outcap";
				return EINVAL;
			}
		} else if (KEY("uid") || KEY("gid")) {
			if (parse_uint(v, 0xfffffffeULL, k[0] == 'u' ? &r->uid : &r->gid)) {
				r->err = "bad uid or gid";
				return EINVAL;
			}
		} else if (KEY("tty")) {
			if (parse_uint(v, 1, &r->tty)) {
				r->err = "bad tty";
				return EINVAL;
			}
		} else if ((allow & EXEC_TTYSIZE) && (KEY("cols") || KEY("rows"))) {
			if (parse_uint(v, 65535, k[0] == 'c' ? &r->cols : &r->rows)) {
				r->err = "bad terminal size";
				return EINVAL;
			}
		} else if ((allow & EXEC_LOGS) && (KEY("log1") || KEY("log2"))) {
			r->log[k[3] - '1'] = v;
		} else {
			r->err = "unknown EXEC field";
			return EINVAL;
		}
#undef KEY
	}
	r->argv[nargs] = NULL;
	r->envp[nenv] = NULL;
	if (!nargs) {
		r->err = "EXEC needs at least one arg";
		return EINVAL;
	}
	if (r->outcap && r->tty) {
		r->err = "outcap with tty=1: a terminal's output is not capped by the agent";
		return EINVAL;
	}
	return 0;
}

/* ---- replies ---- */

/* out builds one reply packet. A reply that does not fit is not sent cut
 * short or dropped: out_end turns it into ERROR errno=EMSGSIZE. Each agent
 * has one (reply_out below, static: 64 KiB is no stack frame's business) and
 * builds one reply at a time. */
struct out {
	size_t len;
	int overflow;
	char buf[REPLY_MAX];
};

static struct out reply_out;

static inline void out_add(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void out_add(struct out *o, const char *fmt, ...)
{
	va_list ap;
	size_t room = sizeof o->buf - o->len;
	if (o->overflow)
		return;
	va_start(ap, fmt);
	int n = vsnprintf(o->buf + o->len, room, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n + 1 > room) {
		o->overflow = 1;
		return;
	}
	o->len += (size_t)n + 1; /* keep the NUL */
}

/* out_begin empties the process's reply buffer and starts a reply with op. */
static inline struct out *out_begin(const char *op)
{
	struct out *o = &reply_out;
	o->len = 0;
	o->overflow = 0;
	out_add(o, "%s", op);
	return o;
}

/* out_room says whether n more bytes (an entry and its "more=1") fit:
 * chunked replies (PS, LIST) send the packet and begin another when not. */
static inline int out_room(const struct out *o, size_t n)
{
	return o->len + n + sizeof "more=1" <= sizeof o->buf;
}

/* out_error makes o an ERROR reply; step (may be NULL) marks a process that
 * could not be started, msg NULL means strerror(err). */
static inline struct out *out_error(int err, const char *step, const char *msg)
{
	struct out *o = out_begin("ERROR");
	out_add(o, "errno=%d", err);
	out_add(o, "msg=%s", msg ? msg : strerror(err));
	if (step)
		out_add(o, "step=%s", step);
	return o;
}

/* out_end finishes a reply: one that overflowed becomes an error. */
static inline void out_end(struct out *o)
{
	if (o->overflow) {
		o->len = 0;
		o->overflow = 0;
		out_add(o, "ERROR");
		out_add(o, "errno=%d", EMSGSIZE);
		out_add(o, "msg=reply too large");
	}
}

#endif /* DSEC_PROTO_H */

/* libFuzzer harness for the EXEC parser both supervisors share
 * (csrc/common/proto.h: the container init and the microVM agent): a packet
 * is split as the agents split it, then parse_exec runs with each agent's
 * set of optional fields. Whatever it accepts must hold what the agents rely
 * on: every argv and envp string inside the packet, both lists
 * NULL-terminated within the vector, at least one arg, tag and groups within
 * their bounds, no output cap with a terminal; and an echo of the request
 * in a reply is never cut short (an overflow is an ERROR). Built with clang
 * -fsanitize=fuzzer,address,undefined by scripts/cfuzz.sh. */
#define _GNU_SOURCE
#include <stdint.h>

#include "../common/proto.h"

static void inside(const char *p, const char *buf, size_t n)
{
	if (p < buf || p >= buf + n || memchr(p, 0, (size_t)(buf + n - p)) == NULL)
		__builtin_trap();
}

static void check(char **f, int nf, char **vec, unsigned allow, const char *buf, size_t size)
{
	struct exec_req r;
	int err = parse_exec(f, nf, vec, allow, &r);
	if (err) {
		if (err != EINVAL || !r.err)
			__builtin_trap();
		return;
	}
	int na = 0, ne = 0;
	for (; r.argv[na]; na++) {
		if (r.argv + na >= vec + nf + 2)
			__builtin_trap();
		inside(r.argv[na], buf, size);
	}
	for (; r.envp[ne]; ne++) {
		if (r.envp + ne >= vec + nf + 2)
			__builtin_trap();
		inside(r.envp[ne], buf, size);
	}
	if (na < 1 || r.envp <= r.argv + na - 1 || (r.outcap && r.tty) || r.tty > 1 ||
	    r.ngroups < 0 || r.ngroups > MAX_GROUPS || r.uid > 0xfffffffeULL || r.gid > 0xfffffffeULL ||
	    r.cols > 65535 || r.rows > 65535 || r.outcap > (1ULL << 50))
		__builtin_trap();
	if (r.tag) {
		inside(r.tag, buf, size);
		if (!*r.tag || strlen(r.tag) > MAX_TAG)
			__builtin_trap();
	}
	if (r.cwd)
		inside(r.cwd, buf, size);
	for (int i = 0; i < 2; i++)
		if (r.log[i] && (!(allow & EXEC_LOGS) || (inside(r.log[i], buf, size), 0)))
			__builtin_trap();
	/* a reply echoing the request: complete, or an ERROR */
	struct out *o = out_begin("STARTED");
	for (int i = 0; r.argv[i]; i++)
		out_add(o, "arg=%s", r.argv[i]);
	int overflowed = o->overflow;
	out_end(o);
	if (o->len == 0 || o->len > sizeof o->buf || o->buf[o->len - 1] != 0 ||
	    (overflowed && strcmp(o->buf, "ERROR")))
		__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char **fields, **vec;
	if (!fields) {
		fields = malloc(sizeof(char *) * MAX_FIELDS);
		vec = malloc(sizeof(char *) * (MAX_FIELDS + 2));
	}
	if (size == 0 || data[size - 1] != 0)
		return 0; /* the agents refuse these before splitting */
	char *buf = malloc(size);
	memcpy(buf, data, size);
	int nf = split_fields(buf, (ssize_t)size, fields);
	if (nf >= 1) {
		check(fields, nf, vec, 0, buf, size);                         /* the init */
		check(fields, nf, vec, EXEC_TTYSIZE | EXEC_LOGS, buf, size); /* the VM agent */
	}
	free(buf);
	return 0;
}

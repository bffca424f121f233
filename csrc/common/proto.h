/*
 * proto.h: the packet helpers shared by dsec's C agents, the container init
 * (csrc/init) and the microVM guest agent (csrc/vmagent): a packet is a list
 * of NUL-terminated strings, the op first, then key=value fields (see
 * internal/initproto). Header-only (static functions) so each agent stays one
 * translation unit built with a single compiler call.
 */
#ifndef DSEC_PROTO_H
#define DSEC_PROTO_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef MAX_FIELDS
#define MAX_FIELDS 65536 /* strings per request */
#endif

/* parse_uint parses a decimal number no larger than max. */
static int parse_uint(const char *s, unsigned long long max, unsigned long long *out)
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
static const char *field(char **f, int nf, const char *key)
{
	size_t kl = strlen(key);
	for (int i = 1; i < nf; i++)
		if (!strncmp(f[i], key, kl) && f[i][kl] == '=')
			return f[i] + kl + 1;
	return NULL;
}

/* split_fields splits a packet of n > 0 bytes ending in NUL into its strings
 * (f has MAX_FIELDS entries); -1 if there are more than MAX_FIELDS. */
static int split_fields(char *buf, ssize_t n, char **f)
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
static int parse_sig(char **f, int nf)
{
	const char *v = field(f, nf, "sig");
	unsigned long long sig;
	if (!v || parse_uint(v, NSIG - 1, &sig))
		return -1;
	return (int)sig;
}

#endif /* DSEC_PROTO_H */

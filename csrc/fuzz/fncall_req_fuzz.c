/* libFuzzer harness for the FnCall zygote's RUN requests
 * (csrc/fncall/dsec-fncall.c): the input is a struct req followed by its
 * strings, which parse_strings splits into argv, env, cwd and file names as
 * the helper's recv_request does (into a preallocated vector: no malloc);
 * every string it hands out must lie inside the request.
 * Built with clang -fsanitize=fuzzer,address,undefined by scripts/cfuzz.sh. */
#define main dsec_fncall_main
#include "../fncall/dsec-fncall.c"
#undef main

static void inside(const char *p, const char *buf, size_t n)
{
	if (p < buf || p >= buf + n || memchr(p, 0, (size_t)(buf + n - p)) == NULL)
		__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct run ru;
	if (size < sizeof ru.r)
		return 0;
	memset(&ru, 0, sizeof ru);
	memcpy(&ru.r, data, sizeof ru.r);
	size_t n = size - sizeof ru.r;
	if (ru.r.strbytes != n) /* the main loop drops these */
		return 0;
	char *buf = malloc(n ? n : 1);
	memcpy(buf, data + sizeof ru.r, n);
	ru.vec = calloc(MAX_VEC, sizeof(char *));
	if (parse_strings(&ru, buf, n) == 0) {
		for (uint32_t j = 0; j < ru.r.argc; j++)
			inside(ru.argv[j], buf, n);
		if (ru.argv[ru.r.argc] != NULL)
			__builtin_trap();
		for (uint32_t j = 0; j < ru.r.envc; j++)
			inside(ru.envp[j], buf, n);
		inside(ru.cwd, buf, n);
		for (uint32_t j = 0; j < ru.r.nfiles; j++)
			inside(ru.fnames[j], buf, n);
	}
	free(buf);
	free(ru.vec);
	return 0;
}

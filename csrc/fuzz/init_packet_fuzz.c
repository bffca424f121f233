/* libFuzzer harness for the C init's control packets (csrc/init/dsec-init.c):
 * a packet is split into its NUL-terminated fields exactly as conn_read does,
 * then every field goes through the parsers a request's values meet
 * (key=value, decimal numbers with bounds, "sig", device lines). Built with
 * clang -fsanitize=fuzzer,address,undefined by scripts/cfuzz.sh. */
#define main dsec_init_main
#include "../init/dsec-init.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char **fields;
	if (!fields)
		fields = xmalloc(sizeof(char *) * MAX_FIELDS);
	if (size == 0 || size > MAX_PACKET || data[size - 1] != 0)
		return 0; /* conn_read refuses these before splitting */
	char *buf = xmalloc(size);
	memcpy(buf, data, size);
	int nf = split_fields(buf, (ssize_t)size, fields);
	if (nf >= 0) {
		for (int i = 0; i < nf; i++)
			if (fields[i] < buf || fields[i] >= buf + size)
				__builtin_trap(); /* a field outside the packet */
		(void)parse_sig(fields, nf);
		for (int i = 1; i < nf; i++) {
			char *k = fields[i], *v = strchr(k, '=');
			if (!v)
				continue;
			v++;
			unsigned long long u;
			struct devnode d;
			(void)parse_uint(v, 1ULL << 50, &u);
			(void)parse_uint(v, 0xfffffffeULL, &u);
			(void)parse_dev(v, &d);
		}
		(void)field(fields, nf, "tag");
	}
	free(buf);
	return 0;
}

#!/bin/sh
# cfuzz.sh: build the libFuzzer harnesses of the C packet parsers (csrc/fuzz:
# the init's control packets, the EXEC parser the init and the microVM agent
# share, the FnCall zygote's RUN requests) with
# clang -fsanitize=fuzzer,address,undefined and run each for $CFUZZTIME seconds
# (default 10). A crash, a sanitizer report or a leak fails the run; the
# reproducer is left in $CFUZZDIR (default: a temp dir, printed).
set -eu
CFUZZTIME=${CFUZZTIME:-10}
CC=${CLANG:-clang}
cd "$(dirname "$0")/.."
command -v "$CC" >/dev/null || { echo "cfuzz: $CC not found (make setup installs clang)" >&2; exit 1; }
dir=${CFUZZDIR:-$(mktemp -d /tmp/dsec-cfuzz.XXXXXX)}
echo "cfuzz: work dir $dir"

build() { # name source
	"$CC" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -w -o "$dir/$1" "$2"
}
build init csrc/fuzz/init_packet_fuzz.c
build exec csrc/fuzz/exec_parse_fuzz.c
build fncall csrc/fuzz/fncall_req_fuzz.c

# Seeds: well-formed requests of each kind.
mkdir -p "$dir/init.corpus" "$dir/exec.corpus" "$dir/fncall.corpus"
printf 'EXEC\0arg=/bin/sh\0arg=-c\0arg=echo hi\0env=A=1\0cwd=/\0uid=1000\0gid=1000\0tag=t1\0outcap=65536\0' >"$dir/init.corpus/exec"
printf 'SIGNAL\0tag=t1\0sig=15\0' >"$dir/init.corpus/signal"
printf 'PS\0' >"$dir/init.corpus/ps"
cp "$dir/init.corpus/exec" "$dir/exec.corpus/exec"
printf 'EXEC\0arg=sh\0tty=1\0cols=120\0rows=40\0tag=bg\0log1=/l/1\0log2=/l/2\0groups=1,2,3\0' >"$dir/exec.corpus/vm"
# struct req (op=1 RUN, argc=1, envc=1, nfiles=1, strbytes=23) + strings
printf '\001\0\0\0\0\0\0\0\001\0\0\0\0\0\0\0\350\003\0\0\350\003\0\0\0\0\0\0\001\0\0\0' >"$dir/fncall.corpus/run"
printf '\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0' >>"$dir/fncall.corpus/run"
printf '\001\0\0\0\001\0\0\0\027\0\0\0\0\0\0\0' >>"$dir/fncall.corpus/run"
printf '/bin/x\0A=1\0/tmp\0644:f.c\0' >>"$dir/fncall.corpus/run"

for h in init exec fncall; do
	echo "cfuzz: $h (${CFUZZTIME}s)"
	(cd "$dir" && "./$h" -max_total_time="$CFUZZTIME" -max_len=65536 -print_final_stats=1 "$h.corpus" 2>"$h.log") || {
		tail -n 60 "$dir/$h.log" >&2
		echo "cfuzz: $h FAILED (reproducer and log in $dir)" >&2
		exit 1
	}
	grep -E '^stat::number_of_executed_units' "$dir/$h.log" | sed "s/^/cfuzz: $h /"
done
[ -n "${CFUZZDIR:-}" ] || rm -rf "$dir"

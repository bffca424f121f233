# progress.sh: sourced by setup.sh and fullvm-image.sh.
#
# with_progress LABEL LOG CMD...: run CMD with its output in LOG and return its
# status. When stderr is a terminal, one status line is redrawn every second:
# LABEL, the seconds so far and LOG's last line (debootstrap's "I: Retrieving
# ...", say), and cleared at the end; piped, in a file or in CI it prints
# nothing extra.
with_progress() {
	wp_label=$1
	wp_log=$2
	shift 2
	if [ ! -t 2 ]; then
		"$@" >"$wp_log" 2>&1
		return
	fi
	"$@" >"$wp_log" 2>&1 &
	wp_pid=$!
	wp_t0=$(date +%s)
	while kill -0 "$wp_pid" 2>/dev/null; do
		wp_last=$(tail -n 1 "$wp_log" 2>/dev/null | tr -d '\r' | cut -c1-60)
		printf '\r\033[K%s: %ss  %s' "$wp_label" $(($(date +%s) - wp_t0)) "$wp_last" >&2
		sleep 1
	done
	printf '\r\033[K' >&2
	wait "$wp_pid"
}

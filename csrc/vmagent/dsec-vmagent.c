/*
 * dsec-vmagent: PID 1 of a dsec microVM (internal/backend/vm).
 *
 * It is the guest's /init in a small initramfs (the agent plus the kernel
 * modules listed in /lib/modules/order). Boot:
 *
 *   1. mount devtmpfs, proc, sysfs; read the dsec.* kernel parameters
 *      (dsec.mode=floor|probe: print a marker and power off at once; that is
 *      the benchmark floor and the KVM boot probe).
 *   2. load the modules in order (finit_module), wait for the block devices.
 *   3. the root: each read-only layer is a virtio block device with serial
 *      "dsec-lN" (N = 0 for the base) holding an EROFS image; upper/ and
 *      work/ are on a tmpfs of dsec.disk bytes whose pages go out to the
 *      writable disk (serial "dsec-rw", a swap area made by the host);
 *      an overlay of them becomes / (switch_root by MS_MOVE + chroot).
 *   4. proc, sys, dev (devtmpfs), devpts, /dev/shm, loopback up, hostname.
 *   5. serve the host over the virtio-serial port named "dsec.agent".
 *
 * Wire format on the port (both directions): frames of a 12-byte header
 * (magic 0xD5EC LE u16, type u8, stream u8, channel u32 LE, length u32 LE)
 * and length payload bytes. Requests and replies are initproto packets
 * (NUL-terminated strings, op first, key=value fields; csrc/common/proto.h)
 * carried in REQ/REP frames on a channel the host picks; a channel carries
 * one request and, for EXEC, WAIT (attach), DIAL and the file streams, the
 * data that follows in DATA/EOF frames (stream 1 = stdout, 2 = stderr).
 * The ops are the container init's (EXEC, WAIT, KILL, SIGNAL, PS, PING) with
 * stdio as streams instead of passed fds, plus RESIZE, DIAL and the file ops
 * STAT, LIST, MKDIR, REMOVE, RENAME, READ, WRITE. A HELLO frame from the host
 * (sent after it connects) resets every channel: a new host process (after
 * a restart) starts clean and re-attaches tagged processes with WAIT.
 * Processes never die because the host went away.
 *
 * The supervisor core is the container init's (csrc/common): the EXEC
 * parser and its field checks and the reply builder (proto.h), the child's
 * steps from fork to execve, reaping and EXITED (super.h), exec_path and
 * loopback_up (sys.h), the frame header's layout (wire.h).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/swap.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "../common/super.h"

#define MAGIC FRAME_MAGIC
#define HDR ((int)sizeof(struct frame_hdr))
#define MAX_FRAME FRAME_MAX
#define CHUNK FRAME_CHUNK
#define MAX_PROCS 4096
#define MAX_REC 4096
#define SANDBOX_CG "/sys/fs/cgroup/sandbox"

enum { T_HELLO = 1, T_REQ = 2, T_DATA = 3, T_EOF = 4, T_CLOSE = 5 };
enum { K_NONE, K_PROC, K_DIAL, K_WRITE };

static void logf_(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "dsec-vmagent: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
}

/* since_boot is the guest's uptime in ms (phases are logged with it). */
static long since_boot(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* dsec.trace=N (the driver's Config.Trace): a timeline of the boot and of
 * the first N execs (guest uptime in ms, 0.1 ms resolution, at each step),
 * kept in memory and printed on the console after each of those execs has
 * exited (the console is slow under TCG: nothing is printed otherwise). */
static int tracing, procs_done;
static char tracebuf[1536];
static size_t tracelen;

static void mark(const char *what)
{
	struct timespec ts;
	if (!tracing || tracelen > sizeof tracebuf - 48)
		return;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	tracelen += (size_t)snprintf(tracebuf + tracelen, sizeof tracebuf - tracelen, " %s=%ld.%ld", what,
				     (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, (ts.tv_nsec / 100000) % 10);
}

static void trace_dump(void)
{
	if (!tracing || !tracelen)
		return;
	logf_("trace:%s", tracebuf);
	tracelen = 0;
	tracing--;
	procs_done = 0;
}

static int ever_connected; /* a host has connected since boot */
static int as_service; /* --service: not PID 1, exit instead of powering off */

static void __attribute__((noreturn)) die(const char *what)
{
	logf_("fatal: %s: %s", what, strerror(errno));
	if (as_service)
		_exit(1);
	sync();
	reboot(RB_POWER_OFF);
	_exit(1);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		die("malloc");
	return p;
}

/* ======================= setup ======================= */

static char cmdline[4096];

static const char *param(const char *key)
{
	static char val[512];
	size_t kl = strlen(key);
	for (char *p = cmdline; *p;) {
		while (*p == ' ' || *p == '\n')
			p++;
		char *e = p;
		while (*e && *e != ' ' && *e != '\n')
			e++;
		if ((size_t)(e - p) > kl && !strncmp(p, key, kl) && p[kl] == '=') {
			size_t n = (size_t)(e - p) - kl - 1;
			if (n >= sizeof val)
				n = sizeof val - 1;
			memcpy(val, p + kl + 1, n);
			val[n] = 0;
			return val;
		}
		p = e;
	}
	return NULL;
}

static void write_file(const char *path, const char *v)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (write(fd, v, strlen(v)) < 0)
			logf_("write %s: %s", path, strerror(errno));
		close(fd);
	}
}

static void xmount(const char *src, const char *dst, const char *type, unsigned long fl, const char *data)
{
	mkdir(dst, 0755);
	if (mount(src, dst, type, fl, data) < 0) {
		logf_("mount %s on %s (%s): %s", src, dst, type, strerror(errno));
		die("mount");
	}
}

/* later: the modules of /lib/modules/later (virtio_balloon), opened before
 * the root switch hides the initramfs and loaded by load_later once the
 * agent serves: nothing before the first exec needs them. */
#define MAX_LATER 8
static int later_fd[MAX_LATER], nlater;
static int later_due;   /* load_later has not run yet */
static int first_exit;  /* a process the host started has exited */
static long ready_at;   /* since_boot() when serve() started */

/* load_list loads (now = 1) or opens for later the modules named in list,
 * in order. */
static void load_list(const char *list, int now)
{
	FILE *f = fopen(list, "r");
	char name[128], path[256];
	if (!f)
		return;
	while (fscanf(f, "%127s", name) == 1) {
		snprintf(path, sizeof path, "/lib/modules/%s.ko", name);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (!now && nlater < MAX_LATER) {
			later_fd[nlater++] = fd;
			unlink(path);
			continue;
		}
		if (syscall(SYS_finit_module, fd, "", 0) < 0 && errno != EEXIST)
			logf_("module %s: %s", name, strerror(errno));
		mark(name);
		close(fd);
		unlink(path); /* frees the initramfs copy */
	}
	fclose(f);
}

static void load_modules(void)
{
	load_list("/lib/modules/order", 1);
	load_list("/lib/modules/later", 0);
}

/* load_later loads the deferred modules and ends expedited RCU: serve()
 * calls it once the first exec has exited, on the first idle moment or
 * 2 s after the agent started serving, whichever comes first. */
static void load_later(void)
{
	for (int i = 0; i < nlater; i++) {
		if (syscall(SYS_finit_module, later_fd[i], "", 0) < 0 && errno != EEXIST)
			logf_("module: %s", strerror(errno));
		close(later_fd[i]);
	}
	nlater = 0;
	later_due = 0;
	write_file("/sys/kernel/rcu_expedited", "0");
	mark("later");
}

/* read_attr reads sysfs file p (one line) into s. */
static int read_attr(const char *p, char *s, size_t n)
{
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t r = read(fd, s, n - 1);
	close(fd);
	if (r <= 0)
		return -1;
	s[r] = 0;
	if (s[r - 1] == '\n')
		s[r - 1] = 0;
	return 0;
}

/* find_dev finds the entry E of sysfs directory dir whose file (dir/E/file)
 * reads want, waiting (if wait) up to 10 s, looking again every 2 ms, and writes
 * /dev/E into dev. Each entry's file is read once and remembered (a block
 * device's serial is a request to the device, a round trip through QEMU):
 * the cache is for one dir and file at a time. */
static int find_dev(const char *dir, const char *file, const char *want, char *dev, size_t n, int wait)
{
	enum { MAXE = 64 };
	static char cdir[64], cname[MAXE][64], cval[MAXE][64];
	static int nc;
	if (strcmp(cdir, dir)) {
		snprintf(cdir, sizeof cdir, "%s", dir);
		nc = 0;
	}
	for (int tries = 0; tries < (wait ? 5000 : 1); tries++) {
		for (int i = 0; i < nc; i++)
			if (!strcmp(cval[i], want)) {
				snprintf(dev, n, "/dev/%s", cname[i]);
				return 0;
			}
		DIR *d = opendir(dir);
		struct dirent *e;
		int added = 0;
		while (d && (e = readdir(d)) && nc < MAXE) {
			char p[400];
			int seen = 0;
			if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof cname[0])
				continue;
			for (int i = 0; i < nc && !seen; i++)
				seen = !strcmp(cname[i], e->d_name);
			snprintf(p, sizeof p, "%s/%s/%s", dir, e->d_name, file);
			if (seen || read_attr(p, cval[nc], sizeof cval[nc]) < 0 || !cval[nc][0])
				continue; /* not there yet: read again next time */
			memcpy(cname[nc], e->d_name, strlen(e->d_name) + 1);
			nc++;
			added = 1;
		}
		if (d)
			closedir(d);
		if (!added && wait)
			usleep(2000);
	}
	return -1;
}

static int find_disk(const char *want, char *dev, size_t n) { return find_dev("/sys/block", "serial", want, dev, n, 1); }

static int port = -1; /* the host's virtio port */
static int open_port(int wait);

static void setup_root(void)
{
	char dev[300], lower[8192] = "", mp[64];
	const char *nl = param("dsec.layers");
	int layers = nl ? atoi(nl) : 0;

	/* Expedited RCU grace periods until the agent serves: the module loads
	 * and the cgroup2 mount (favordynmods) wait for grace periods, ~10 ms
	 * each on one TCG vCPU; restored after the first exec or idle moment
	 * (load_later). */
	write_file("/sys/kernel/rcu_expedited", "1");
	load_modules();
	/* The port opens now if it is there already (its handshake with QEMU
	 * runs in the background after virtio_console's load), before the root
	 * is set up: QEMU hands the host's waiting HELLO over meanwhile, and
	 * serve() finds it there. Else open_channel waits for it. (The fd
	 * outlives the switch to the new root.) */
	port = open_port(0);
	mark("port");
	mark("modules");
	/* The writable layer: a tmpfs of dsec.disk bytes, paged out to the
	 * sandbox's own disk (a swap area the host wrote; swap is built into the
	 * kernel). Mounting ext4 instead took loading ext4, jbd2, mbcache and
	 * crc16, 0.2-1 s of guest time under TCG, on every boot. */
	if (find_disk("dsec-rw", dev, sizeof dev) < 0)
		die("writable disk dsec-rw not found");
	mark("rwdisk");
	if (swapon(dev, 0) < 0) {
		logf_("swapon %s: %s", dev, strerror(errno));
		die("swapon");
	}
	mark("swapon");
	const char *disk = param("dsec.disk");
	char opts0[96];
	snprintf(opts0, sizeof opts0, "size=%s,nr_inodes=0,mode=0755", disk && *disk ? disk : "64m");
	xmount("upper", "/rw", "tmpfs", MS_NOATIME, opts0);
	mkdir("/rw/upper", 0755);
	mkdir("/rw/work", 0755);
	for (int i = layers - 1; i >= 0; i--) { /* overlay order: top first */
		char ser[32];
		snprintf(ser, sizeof ser, "dsec-l%d", i);
		if (find_disk(ser, dev, sizeof dev) < 0)
			die("layer disk not found");
		snprintf(mp, sizeof mp, "/layers/%d", i);
		mkdir("/layers", 0755);
		/* 1 MiB of readahead on the read-only layers (128 KiB by
		 * default): their data comes from the host's page cache, and
		 * fewer, larger requests are cheaper under emulation (a first
		 * exec of busybox took 15-30 ms less). */
		char ra[400];
		snprintf(ra, sizeof ra, "/sys/block/%s/queue/read_ahead_kb", dev + 5);
		write_file(ra, "1024");
		xmount(dev, mp, "erofs", MS_RDONLY, "");
		if (*lower)
			strcat(lower, ":");
		strcat(lower, mp);
	}
	if (!layers)
		die("no layers");
	char opts[8400];
	snprintf(opts, sizeof opts, "lowerdir=%s,upperdir=/rw/upper,workdir=/rw/work", lower);
	mark("layers");
	xmount("overlay", "/newroot", "overlay", 0, opts);
	mark("root");
	if (chdir("/newroot") < 0 || mount(".", "/", NULL, MS_MOVE, NULL) < 0 || chroot(".") < 0 || chdir("/") < 0)
		die("switch root");
	mark("switched");
	xmount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "");
	xmount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "");
	xmount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
	xmount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620");
	unlink("/dev/ptmx");
	symlink("pts/ptmx", "/dev/ptmx");
	xmount("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	mkdir("/tmp", 01777);
	mark("mounts");
	/* Every process the host starts goes into one cgroup: FREEZE/THAW
	 * (pause) freeze it and leave the agent running. */
	/* favordynmods: moving a process into a cgroup (each exec) no longer
	 * waits for an RCU grace period (several ms on one TCG vCPU). */
	if (mount("cgroup2", "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, "favordynmods") == 0 ||
	    mount("cgroup2", "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, "") == 0)
		mkdir(SANDBOX_CG, 0755);
	mark("cgroup");
	if (loopback_up())
		die("loopback");
	mark("lo");
	const char *h = param("dsec.hostname");
	if (h)
		sethostname(h, strlen(h));
}

/* ======================= state ======================= */

struct buf {
	char *p;
	size_t len, cap;
};

static void buf_add(struct buf *b, const void *d, size_t n)
{
	if (b->len + n > b->cap) {
		size_t c = b->cap ? b->cap * 2 : 4096;
		while (c < b->len + n)
			c *= 2;
		b->p = realloc(b->p, c);
		if (!b->p)
			die("realloc");
		b->cap = c;
	}
	memcpy(b->p + b->len, d, n);
	b->len += n;
}

static void buf_drop(struct buf *b, size_t n)
{
	memmove(b->p, b->p + n, b->len - n);
	b->len -= n;
}

struct proc {
	int used;
	pid_t pid;
	char *tag;
	char *log[2];    /* the host's log files of a background process (opaque) */
	int running;
	struct exit_rec exit; /* once it is not running */
	int out[2];      /* stdout/stderr pipes (read ends), -1 when closed */
	int in;          /* stdin pipe write end, -1 when closed */
	int ptm;         /* terminal master, -1 without one */
	long long cap;   /* output cap per stream, 0: none */
	long long sent[2];
	int trunc[2];
	uint32_t ch;     /* attached channel, 0: none */
	int in_eof;      /* host closed stdin: close once buffered input is written */
	int eof_sent;    /* the terminal got its EOF character(s) */
	char last;       /* last byte written to the terminal */
	struct buf inbuf;
	long long seq;   /* record order, for trimming exit records */
};

struct chan {
	uint32_t id;
	int kind;
	int idx;  /* K_PROC: proc index */
	int fd;   /* K_DIAL: socket; K_WRITE: temp file */
	char *path, *tmp; /* K_WRITE */
	long long max, written;
	struct buf out; /* K_DIAL: data for the socket */
	int eof;
	struct chan *next;
};

static struct proc procs[MAX_PROCS];
/* nprocs is one past the highest slot in use: the loops over procs (the
 * serve loop's poll set, reaping, tags) stop there instead of walking all
 * MAX_PROCS slots on every wakeup. */
static int nprocs;
static int sigfd = -1; /* SIGCHLD: reap as soon as a child exits */
static struct chan *chans;
static int connected;
static struct buf rbuf, wbuf;
static char **fields;
static long long seq;

/* ======================= port output ======================= */

/* flush writes wbuf to the port, waiting while the host reads (a stalled
 * or absent host drops the data after 2 s rather than wedging the guest). */
static void flush(void)
{
	while (wbuf.len) {
		ssize_t n = write(port, wbuf.p, wbuf.len);
		if (n > 0) {
			buf_drop(&wbuf, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		struct pollfd p = {port, POLLOUT, 0};
		if (n < 0 && errno == EAGAIN && poll(&p, 1, 2000) == 1 && !(p.revents & POLLHUP))
			continue;
		wbuf.len = 0;
		connected = 0;
		return;
	}
}

static void frame(int type, int stream, uint32_t ch, const void *d, size_t n)
{
	unsigned char h[HDR];
	if (!connected)
		return;
	h[0] = MAGIC & 0xff;
	h[1] = MAGIC >> 8;
	h[2] = (unsigned char)type;
	h[3] = (unsigned char)stream;
	for (int i = 0; i < 4; i++) {
		h[4 + i] = (unsigned char)(ch >> (8 * i));
		h[8 + i] = (unsigned char)(n >> (8 * i));
	}
	buf_add(&wbuf, h, HDR);
	if (n)
		buf_add(&wbuf, d, n);
	if (wbuf.len > 64 * 1024)
		flush();
}

/* replies: csrc/common/proto.h builds them in its one buffer */
static void send_out(uint32_t ch, struct out *o)
{
	out_end(o);
	frame(T_REQ, 0, ch, o->buf, o->len);
}

static void send_error(uint32_t ch, int err, const char *step, const char *msg)
{
	send_out(ch, out_error(err, step, msg));
}

static void send_simple(uint32_t ch, const char *op) { send_out(ch, out_begin(op)); }

/* ======================= channels ======================= */

static struct chan *find_chan(uint32_t id)
{
	for (struct chan *c = chans; c; c = c->next)
		if (c->id == id)
			return c;
	return NULL;
}

static struct chan *new_chan(uint32_t id)
{
	struct chan *c = calloc(1, sizeof *c);
	if (!c)
		die("calloc");
	c->id = id;
	c->fd = -1;
	c->idx = -1;
	c->next = chans;
	chans = c;
	return c;
}

static void free_chan(struct chan *c)
{
	struct chan **pp = &chans;
	while (*pp && *pp != c)
		pp = &(*pp)->next;
	if (*pp)
		*pp = c->next;
	if (c->kind == K_PROC && c->idx >= 0 && procs[c->idx].ch == c->id)
		procs[c->idx].ch = 0;
	if (c->fd >= 0)
		close(c->fd);
	if (c->tmp) {
		unlink(c->tmp);
		free(c->tmp);
	}
	free(c->path);
	free(c->out.p);
	free(c);
}

/* ======================= processes ======================= */

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* pump reads one chunk of stream s (0 stdout/terminal, 1 stderr) of p and
 * forwards it, applying the output cap. Returns bytes read, 0 at EOF, -1
 * when nothing is ready. */
static ssize_t pump(struct proc *p, int s)
{
	static char b[CHUNK];
	int *fd = p->ptm >= 0 && s == 0 ? &p->ptm : &p->out[s];
	if (*fd < 0)
		return 0;
	ssize_t n = read(*fd, b, sizeof b);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return -1;
	if (n <= 0) {
		if (fd == &p->ptm && p->tag && p->running)
			return -1; /* a kept terminal waits for a re-attach */
		close_fd(fd);
		if (p->ch)
			frame(T_EOF, s + 1, p->ch, NULL, 0);
		return 0;
	}
	if (!p->ch)
		return n; /* nobody attached: dropped */
	size_t m = (size_t)n;
	if (p->cap > 0 && p->ptm < 0) {
		long long room = p->cap - p->sent[s];
		if (room < 0)
			room = 0;
		if ((long long)m > room) {
			if (room)
				frame(T_DATA, s + 1, p->ch, b, (size_t)room);
			p->sent[s] += room;
			if (!p->trunc[s]) {
				char msg[96];
				int l = snprintf(msg, sizeof msg, "\n[dsec: output truncated after %lld bytes]\n", p->cap);
				frame(T_DATA, s + 1, p->ch, msg, (size_t)l);
				p->trunc[s] = 1;
			}
			return n;
		}
	}
	p->sent[s] += (long long)m;
	frame(T_DATA, s + 1, p->ch, b, m);
	return n;
}

static void write_stdin(struct proc *p)
{
	int fd = p->ptm >= 0 ? p->ptm : p->in;
	while (fd >= 0 && p->inbuf.len) {
		ssize_t n = write(fd, p->inbuf.p, p->inbuf.len);
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			p->inbuf.len = 0;
			break;
		}
		p->last = p->inbuf.p[n - 1];
		buf_drop(&p->inbuf, (size_t)n);
	}
	if (p->in_eof && !p->inbuf.len && p->ptm < 0)
		close_fd(&p->in);
	/* The end of a terminal's input is what a typist makes: ^D in canonical
	 * mode (twice after a partial line); a raw-mode program gets none. */
	struct termios tio;
	if (p->in_eof && !p->inbuf.len && p->ptm >= 0 && !p->eof_sent && tcgetattr(p->ptm, &tio) == 0) {
		p->eof_sent = 1;
		if (tio.c_lflag & ICANON) {
			char eof = (char)tio.c_cc[VEOF];
			if (p->last && p->last != '\n' && p->last != eof && write(p->ptm, &eof, 1) < 0)
				return;
			if (write(p->ptm, &eof, 1) < 0)
				return;
		}
	}
}

/* free_slot marks p unused and lowers nprocs past unused top slots. */
static void free_slot(struct proc *p)
{
	p->used = 0;
	while (nprocs > 0 && !procs[nprocs - 1].used)
		nprocs--;
}

static void finish(struct proc *p)
{
	for (int s = 0; s < 2; s++)
		while (pump(p, s) > 0)
			;
	if (p->ptm >= 0 && !p->tag) {
		close_fd(&p->ptm);
		if (p->ch)
			frame(T_EOF, 1, p->ch, NULL, 0);
	}
	for (int s = 0; s < 2; s++)
		if (p->out[s] >= 0) {
			close_fd(&p->out[s]);
			if (p->ch)
				frame(T_EOF, s + 1, p->ch, NULL, 0);
		}
	if (p->tag && p->ptm >= 0)
		close_fd(&p->ptm);
	close_fd(&p->in);
	free(p->inbuf.p);
	p->inbuf = (struct buf){0};
	mark("exited");
	procs_done = first_exit = 1;
	if (p->ch) {
		send_out(p->ch, out_exited(p->pid, &p->exit));
		struct chan *c = find_chan(p->ch);
		if (c)
			c->idx = -1;
		p->ch = 0;
	}
	if (!p->tag)
		free_slot(p); /* untagged: no record kept */
	for (int s = 0; s < 2; s++) {
		free(p->log[s]);
		p->log[s] = NULL;
	}
}

static void trim_records(void)
{
	int n = 0, oldest = -1;
	for (int i = 0; i < nprocs; i++)
		if (procs[i].used && procs[i].tag && !procs[i].running) {
			n++;
			if (oldest < 0 || procs[i].seq < procs[oldest].seq)
				oldest = i;
		}
	if (n > MAX_REC && oldest >= 0) {
		free(procs[oldest].log[0]);
		free(procs[oldest].log[1]);
		free(procs[oldest].tag);
		free_slot(&procs[oldest]);
	}
}

static void reap(void)
{
	struct exit_rec e;
	pid_t pid;
	while ((pid = reap_next(&e))) {
		for (int i = 0; i < nprocs; i++) {
			struct proc *p = &procs[i];
			if (p->used && p->running && p->pid == pid) {
				p->running = 0;
				p->exit = e;
				finish(p);
				if (p->tag)
					trim_records(); /* a new exit record */
				break;
			}
		}
	}
}

static int find_tag(const char *tag)
{
	for (int i = 0; i < nprocs; i++)
		if (procs[i].used && procs[i].tag && !strcmp(procs[i].tag, tag))
			return i;
	return -1;
}

static void nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

/* spawn is what a vfork child gets from do_exec; err and step are the
 * child's report of a failed step (it shares the agent's memory, and the
 * agent runs again only once the child has exec'd or exited). */
struct spawn {
	const struct exec_req *r;
	int fd[3]; /* with a terminal: its slave three times */
	volatile int err;
	volatile int step;
};

/* spawn_child runs in the vfork child: raw system calls only (no libc
 * state is touched: the memory is the agent's), then exec. */
static void __attribute__((noreturn, noinline)) spawn_child(struct spawn *sp)
{
	struct {
		void *handler;
		unsigned long flags;
		void *restorer;
		unsigned long mask;
	} dfl = {0};
	unsigned long none = 0;
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, sizeof none);
	/* The agent installs no signal handlers (SIGCHLD comes through a
	 * signalfd) and ignores SIGPIPE only: exec resets nothing that is
	 * ignored, so that one goes back to the default here. (Resetting all
	 * 64 was 64 system calls per exec.) */
	syscall(SYS_rt_sigaction, SIGPIPE, &dfl, NULL, sizeof dfl.mask);
	int step = exec_steps(sp->r, sp->fd);
	sp->step = step;
	sp->err = errno ? errno : EINVAL;
	_exit(127);
}

/* spawn vforks a child that runs sp (a function of its own: nothing of
 * do_exec's frame lives across the vfork). */
/* clone3's arguments up to version 2 (linux/sched.h; cgroup is the last). */
struct clone_args2 {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size,
		cgroup;
};
#define X_CLONE_INTO_CGROUP 0x200000000ULL

#if defined(__x86_64__)
/* dsec_vfork3 is clone3 for a vfork (CLONE_VM | CLONE_VFORK and no stack of
 * the child's own): as in vfork, the return address is kept in a register
 * across the system call, since the child runs on the same stack and
 * overwrites it before the parent returns. Returns the pid (0 in the child)
 * or -errno. */
long dsec_vfork3(struct clone_args2 *a, size_t size) __attribute__((returns_twice));
__asm__(".text\n"
	".globl dsec_vfork3\n"
	".type dsec_vfork3,@function\n"
	"dsec_vfork3:\n"
	"	pop %rdx\n"
	"	mov $435, %eax\n" /* SYS_clone3 */
	"	syscall\n"
	"	push %rdx\n"
	"	ret\n"
	".size dsec_vfork3, .-dsec_vfork3\n");
#endif

static int cg_fd = -2;  /* the sandbox cgroup's directory (-2: not opened yet) */
static int cg_frozen;   /* FREEZE is in force */
static int clone3_ok = 1;

/* spawn vforks a child that runs sp (a function of its own: nothing of
 * do_exec's frame lives across the vfork). The child starts in the sandbox
 * cgroup (clone3 CLONE_INTO_CGROUP) unless that is frozen (the child would
 * freeze before it could exec, and the vforked agent with it) or clone3 is
 * missing; *in_cg says whether it did. */
static pid_t __attribute__((noinline)) spawn(struct spawn *sp, int *in_cg)
{
	pid_t pid;
	*in_cg = 0;
#if defined(__x86_64__)
	if (cg_fd == -2)
		cg_fd = open(SANDBOX_CG, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (clone3_ok && cg_fd >= 0 && !cg_frozen) {
		struct clone_args2 a = {.flags = CLONE_VM | CLONE_VFORK | X_CLONE_INTO_CGROUP,
					.exit_signal = SIGCHLD, .cgroup = (uint64_t)cg_fd};
		long r = dsec_vfork3(&a, sizeof a);
		if (r == 0)
			spawn_child(sp);
		if (r > 0) {
			*in_cg = 1;
			return (pid_t)r;
		}
		if (r == -ENOSYS || r == -E2BIG)
			clone3_ok = 0; /* an older kernel */
		/* Any failure: vfork and move, as without clone3 (a failed move
		 * is logged, and the process runs, as before). */
	}
#endif
	pid = vfork();
	if (pid == 0)
		spawn_child(sp);
	return pid;
}

static void do_exec(struct chan *c, char **f, int nf)
{
	static char **vec; /* argv and envp, MAX_FIELDS + 2 entries */
	struct exec_req r;
	int slot = -1;

	mark("exec");
	if (!vec)
		vec = xmalloc(sizeof(char *) * (MAX_FIELDS + 2));
	int err = parse_exec(f, nf, vec, EXEC_TTYSIZE | EXEC_LOGS, &r);
	if (err) {
		send_error(c->id, err, NULL, r.err);
		return;
	}
	if (r.tag && find_tag(r.tag) >= 0) {
		send_error(c->id, EEXIST, NULL, "tag in use");
		return;
	}
	for (int i = 0; i < MAX_PROCS; i++)
		if (!procs[i].used) {
			slot = i;
			break;
		}
	if (slot < 0) {
		send_error(c->id, EAGAIN, NULL, "too many processes");
		return;
	}
	int tty = (int)r.tty;

	int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1}, ptm = -1, pts = -1;
	if (tty) {
		struct winsize ws = {.ws_row = (unsigned short)r.rows, .ws_col = (unsigned short)r.cols};
		if (openpty(&ptm, &pts, NULL, NULL, &ws) < 0) {
			send_error(c->id, errno, NULL, "openpty");
			goto out;
		}
		fcntl(ptm, F_SETFD, FD_CLOEXEC);
	} else if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0) {
		send_error(c->id, errno, NULL, "pipe");
		goto out;
	}
	struct spawn sp = {.r = &r, .fd = {pin[0], pout[1], perr[1]}};
	if (tty)
		sp.fd[0] = sp.fd[1] = sp.fd[2] = pts;
	/* vfork: the agent is suspended until the child has exec'd (or failed),
	 * and nothing of its address space is copied (a fork's page-table copy
	 * and copy-on-write faults were most of an exec's cost under TCG). */
	int in_cg;
	pid_t pid = spawn(&sp, &in_cg);
	mark("spawned");
	if (pid < 0) {
		send_error(c->id, errno, NULL, "fork");
		goto out;
	}
	if (sp.err) {
		int e = sp.err;
		waitpid(pid, NULL, 0);
		send_error(c->id, e, step_names[sp.step], strerror(e));
		goto out;
	}
	/* Into the sandbox cgroup once it runs the program, if it did not
	 * start there: a child joining a frozen cgroup would freeze before it
	 * could exec and report. */
	int cg = in_cg ? -1 : open(SANDBOX_CG "/cgroup.procs", O_WRONLY | O_CLOEXEC);
	if (cg >= 0) {
		char pb[24];
		int pl = snprintf(pb, sizeof pb, "%d", (int)pid);
		if (write(cg, pb, (size_t)pl) < 0)
			logf_("cgroup.procs %d: %s", (int)pid, strerror(errno));
		close(cg);
	}
	mark("cgmoved");
	struct proc *p = &procs[slot];
	memset(p, 0, sizeof *p);
	p->used = 1;
	if (slot >= nprocs)
		nprocs = slot + 1;
	p->pid = pid;
	p->running = 1;
	p->tag = r.tag ? strdup(r.tag) : NULL;
	for (int s = 0; s < 2; s++)
		if (r.tag && r.log[s])
			p->log[s] = strdup(r.log[s]);
	p->cap = (long long)r.outcap;
	p->seq = ++seq;
	p->ch = c->id;
	p->ptm = ptm;
	ptm = -1;
	if (tty) {
		p->in = p->out[0] = p->out[1] = -1;
		nonblock(p->ptm);
	} else {
		p->in = pin[1];
		p->out[0] = pout[0];
		p->out[1] = perr[0];
		pin[1] = pout[0] = perr[0] = -1;
		nonblock(p->in);
		nonblock(p->out[0]);
		nonblock(p->out[1]);
	}
	c->kind = K_PROC;
	c->idx = slot;
	struct out *o = out_begin("STARTED");
	out_add(o, "pid=%d", (int)pid);
	send_out(c->id, o);
out:
	close_fd(&pts);
	close_fd(&ptm);
	close_fd(&pin[0]);
	close_fd(&pin[1]);
	close_fd(&pout[0]);
	close_fd(&pout[1]);
	close_fd(&perr[0]);
	close_fd(&perr[1]);
}

static void do_wait(struct chan *c, char **f, int nf)
{
	const char *tag = field(f, nf, "tag");
	int i = tag ? find_tag(tag) : -1;
	if (i < 0) {
		send_error(c->id, ESRCH, NULL, "no such process");
		return;
	}
	struct proc *p = &procs[i];
	if (!p->running) {
		send_out(c->id, out_exited(p->pid, &p->exit));
		return;
	}
	if (p->ch) {
		struct chan *old = find_chan(p->ch);
		if (old)
			old->idx = -1;
	}
	p->ch = c->id;
	c->kind = K_PROC;
	c->idx = i;
	struct out *o = out_begin("RUNNING");
	out_add(o, "pid=%d", (int)p->pid);
	if (p->ptm >= 0)
		out_add(o, "tty=1");
	for (int s = 0; s < 2; s++)
		if (p->log[s])
			out_add(o, "log%d=%s", s + 1, p->log[s]);
	send_out(c->id, o);
}


static void do_kill(struct chan *c, char **f, int nf)
{
	int sig = parse_sig(f, nf);
	if (sig < 0 || c->kind != K_PROC || c->idx < 0)
		return;
	struct proc *p = &procs[c->idx];
	if (!p->running)
		return;
	if (p->ptm >= 0) {
		pid_t fg = tcgetpgrp(p->ptm);
		if (fg > 0) {
			kill(-fg, sig);
			if (sig != SIGKILL)
				return;
		}
	}
	kill(-p->pid, sig);
}

static void do_signal(struct chan *c, char **f, int nf)
{
	const char *tag = field(f, nf, "tag");
	int sig = parse_sig(f, nf);
	int i = tag ? find_tag(tag) : -1;
	if (sig < 0) {
		send_error(c->id, EINVAL, NULL, "bad sig");
		return;
	}
	if (i < 0 || !procs[i].running) {
		send_error(c->id, ESRCH, NULL, "no such process");
		return;
	}
	if (kill(-procs[i].pid, sig) < 0) {
		send_error(c->id, errno, NULL, "kill");
		return;
	}
	send_simple(c->id, "OK");
}

static void do_resize(struct chan *c, char **f, int nf)
{
	unsigned long long cols, rows;
	const char *vc = field(f, nf, "cols"), *vr = field(f, nf, "rows");
	if (!vc || !vr || parse_uint(vc, 65535, &cols) || parse_uint(vr, 65535, &rows) ||
	    c->kind != K_PROC || c->idx < 0 || procs[c->idx].ptm < 0)
		return;
	struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
	ioctl(procs[c->idx].ptm, TIOCSWINSZ, &ws);
}

static void ps_send(void *c, struct out *o) { send_out(((struct chan *)c)->id, o); }

static void do_ps(struct chan *c)
{
	struct out *o = out_begin("PS");
	for (int i = 0; i < nprocs; i++) {
		struct proc *p = &procs[i];
		if (p->used && p->tag)
			out_ps_entry(o, p->tag, p->pid, p->running, ps_send, c);
	}
	send_out(c->id, o);
}

/* freeze sets the sandbox cgroup's freezer and waits (up to 5 s) until
 * the kernel reports the state reached. */
static void do_freeze(struct chan *c, int on)
{
	int fd = open(SANDBOX_CG "/cgroup.freeze", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, on ? "1" : "0", 1) < 0) {
		send_error(c->id, errno, NULL, "cgroup.freeze");
		if (fd >= 0)
			close(fd);
		return;
	}
	close(fd);
	cg_frozen = on;
	for (int i = 0; on && i < 500; i++) {
		char b[256] = {0};
		int ev = open(SANDBOX_CG "/cgroup.events", O_RDONLY | O_CLOEXEC);
		ssize_t n = ev >= 0 ? read(ev, b, sizeof b - 1) : -1;
		if (ev >= 0)
			close(ev);
		if (n > 0 && strstr(b, "frozen 1"))
			break;
		usleep(10000);
	}
	send_simple(c->id, "OK");
}

/* ======================= dial ======================= */

static void do_dial(struct chan *c, char **f, int nf)
{
	unsigned long long port_;
	const char *v = field(f, nf, "port");
	if (!v || parse_uint(v, 65535, &port_) || !port_) {
		send_error(c->id, EINVAL, NULL, "bad port");
		return;
	}
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port_)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) < 0) {
		int e = errno;
		if (s >= 0)
			close(s);
		send_error(c->id, e, NULL, "connect");
		return;
	}
	nonblock(s);
	c->kind = K_DIAL;
	c->fd = s;
	send_simple(c->id, "OK");
}

static void dial_read(struct chan *c)
{
	static char b[CHUNK];
	ssize_t n = read(c->fd, b, sizeof b);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		frame(T_EOF, 1, c->id, NULL, 0);
		shutdown(c->fd, SHUT_RD);
		c->eof |= 2;
		return;
	}
	frame(T_DATA, 1, c->id, b, (size_t)n);
}

static void dial_write(struct chan *c)
{
	while (c->out.len) {
		ssize_t n = write(c->fd, c->out.p, c->out.len);
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			c->out.len = 0;
			break;
		}
		buf_drop(&c->out, (size_t)n);
	}
	if (c->eof & 1)
		shutdown(c->fd, SHUT_WR);
}

/* ======================= files ======================= */

static void stat_fields(struct out *o, const char *path, struct stat *st)
{
	out_add(o, "mode=%u", (unsigned)st->st_mode);
	out_add(o, "size=%lld", (long long)st->st_size);
	out_add(o, "mtime=%lld.%09ld", (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
	out_add(o, "uid=%u", (unsigned)st->st_uid);
	out_add(o, "gid=%u", (unsigned)st->st_gid);
	if (S_ISLNK(st->st_mode)) {
		char l[4096];
		ssize_t n = readlink(path, l, sizeof l - 1);
		if (n >= 0) {
			l[n] = 0;
			out_add(o, "link=%s", l);
		}
	}
}

static void reply_stat(uint32_t ch, const char *path)
{
	struct stat st;
	if (lstat(path, &st) < 0) {
		send_error(ch, errno, NULL, NULL);
		return;
	}
	struct out *o = out_begin("STAT");
	stat_fields(o, path, &st);
	send_out(ch, o);
}

static void do_list(struct chan *c, const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	if (!d) {
		send_error(c->id, errno, NULL, NULL);
		return;
	}
	struct out *o = out_begin("LIST");
	while ((e = readdir(d))) {
		struct stat st;
		char l[4096] = "";
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISLNK(st.st_mode)) {
			ssize_t n = readlinkat(dirfd(d), e->d_name, l, sizeof l - 1);
			l[n > 0 ? n : 0] = 0;
		}
		if (!out_room(o, strlen(e->d_name) + strlen(l) + 128)) {
			out_add(o, "more=1");
			send_out(c->id, o);
			out_begin("LIST");
		}
		/* MODE:SIZE:MTIME:UID:GID:LINKLEN:LINK NAME (the name is last) */
		out_add(o, "ent=%u:%lld:%lld.%09ld:%u:%u:%zu:%s%s", (unsigned)st.st_mode, (long long)st.st_size,
			(long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (unsigned)st.st_uid, (unsigned)st.st_gid,
			strlen(l), l, e->d_name);
	}
	closedir(d);
	send_out(c->id, o);
}

static int mkdir_parents(char *p, mode_t mode)
{
	for (char *s = p + 1; *s; s++)
		if (*s == '/') {
			*s = 0;
			if (mkdir(p, mode) < 0 && errno != EEXIST) {
				*s = '/';
				return -1;
			}
			*s = '/';
		}
	if (mkdir(p, mode) < 0 && errno != EEXIST)
		return -1;
	return 0;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return (flag == FTW_DP ? rmdir(p) : unlink(p)) < 0 && errno != ENOENT ? -1 : 0;
}

static void do_read(struct chan *c, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		send_error(c->id, errno, NULL, NULL);
		if (fd >= 0)
			close(fd);
		return;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		send_error(c->id, S_ISDIR(st.st_mode) ? EISDIR : EINVAL, NULL, "not a regular file");
		return;
	}
	struct out *o = out_begin("STAT");
	stat_fields(o, path, &st);
	send_out(c->id, o);
	static char b[CHUNK];
	ssize_t n;
	while ((n = read(fd, b, sizeof b)) > 0)
		frame(T_DATA, 1, c->id, b, (size_t)n);
	close(fd);
	frame(T_EOF, 1, c->id, NULL, 0);
}

static void do_write_open(struct chan *c, char **f, int nf, const char *path)
{
	unsigned long long mode = 0644, max = 0;
	const char *v;
	if (((v = field(f, nf, "mode")) && parse_uint(v, 07777, &mode)) ||
	    ((v = field(f, nf, "max")) && parse_uint(v, 1ULL << 50, &max))) {
		send_error(c->id, EINVAL, NULL, "bad number");
		return;
	}
	struct stat st;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		send_error(c->id, EISDIR, NULL, NULL);
		return;
	}
	size_t n = strlen(path) + 32;
	c->tmp = xmalloc(n);
	snprintf(c->tmp, n, "%s.dsec-tmp.%u", path, c->id);
	c->fd = open(c->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, (mode_t)mode);
	if (c->fd < 0) {
		send_error(c->id, errno, NULL, NULL);
		free(c->tmp);
		c->tmp = NULL;
		return;
	}
	fchmod(c->fd, (mode_t)mode);
	c->path = strdup(path);
	c->max = (long long)max;
	c->kind = K_WRITE;
	send_simple(c->id, "OK");
}

static void write_data(struct chan *c, const char *d, size_t n)
{
	if (c->fd < 0)
		return;
	if (c->max && c->written + (long long)n > c->max) {
		send_error(c->id, EFBIG, NULL, "file larger than the limit");
		close_fd(&c->fd);
		return;
	}
	while (n) {
		ssize_t w = write(c->fd, d, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			send_error(c->id, errno ? errno : EIO, NULL, NULL);
			close_fd(&c->fd);
			return;
		}
		d += w;
		n -= (size_t)w;
		c->written += w;
	}
}

static void write_done(struct chan *c)
{
	if (c->fd < 0)
		return;
	close_fd(&c->fd);
	if (rename(c->tmp, c->path) < 0) {
		send_error(c->id, errno, NULL, NULL);
		return;
	}
	free(c->tmp);
	c->tmp = NULL;
	reply_stat(c->id, c->path);
}

/* ======================= requests ======================= */

static int hexval(char c);

/* <linux/random.h>'s ioctls (musl's headers have no linux/): add entropy
 * to the input pool and credit it; reseed the generator from the pool. */
#define RNDADDENTROPY _IOW('R', 0x03, int[2])
#define RNDRESEEDCRNG _IO('R', 0x07)

/* do_ident gives a guest restored from a snapshot (internal/backend/vm/microvm's
 * templates) its own identity: every clone of one snapshot wakes with the
 * template's host name, its clock stopped when the snapshot was taken and
 * the same random number generator state. host sets the host name, time
 * (ns since the epoch) the clock, and seed (hex, up to 64 bytes from the
 * host's generator) is mixed in and credited, and the kernel's generator
 * reseeded from it at once (every per-CPU state too). */
static void do_ident(uint32_t ch, char **f, int nf)
{
	const char *h = field(f, nf, "host"), *t = field(f, nf, "time"), *s = field(f, nf, "seed");
	unsigned long long ns;
	if (h && (strlen(h) > 64 || sethostname(h, strlen(h)) < 0)) {
		send_error(ch, strlen(h) > 64 ? EINVAL : errno, "hostname", NULL);
		return;
	}
	if (t) {
		if (parse_uint(t, ~0ULL, &ns)) {
			send_error(ch, EINVAL, "time", "bad time");
			return;
		}
		struct timespec ts = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
		if (clock_settime(CLOCK_REALTIME, &ts) < 0) {
			send_error(ch, errno, "time", NULL);
			return;
		}
	}
	if (s) {
		struct {
			int entropy_count, buf_size; /* struct rand_pool_info */
			uint32_t b[16];
		} rp;
		size_t n = strlen(s);
		if (n % 2 || n > 2 * sizeof rp.b) {
			send_error(ch, EINVAL, "seed", "bad seed");
			return;
		}
		memset(&rp, 0, sizeof rp);
		unsigned char *out = (unsigned char *)rp.b;
		for (size_t i = 0; i < n; i += 2) {
			int hi = hexval(s[i]), lo = hexval(s[i + 1]);
			if (hi < 0 || lo < 0) {
				send_error(ch, EINVAL, "seed", "bad seed");
				return;
			}
			out[i / 2] = (unsigned char)(hi << 4 | lo);
		}
		rp.buf_size = (int)(n / 2);
		rp.entropy_count = (int)(n / 2 * 8);
		int fd = open("/dev/urandom", O_RDWR | O_CLOEXEC);
		if (fd < 0 || ioctl(fd, RNDADDENTROPY, &rp) < 0 || ioctl(fd, RNDRESEEDCRNG) < 0) {
			int e = errno;
			if (fd >= 0)
				close(fd);
			send_error(ch, e, "seed", NULL);
			return;
		}
		close(fd);
	}
	mark("ident");
	send_simple(ch, "OK");
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

static void handle_req(uint32_t ch, char *d, size_t n)
{
	struct chan *c = find_chan(ch);
	int nf;
	if (n == 0 || d[n - 1] != 0 || (nf = split_fields(d, (ssize_t)n, fields)) < 1) {
		send_error(ch, EINVAL, NULL, "malformed packet");
		return;
	}
	const char *op = fields[0], *path = field(fields, nf, "path");
	if (!strcmp(op, "KILL")) {
		if (c)
			do_kill(c, fields, nf);
		return;
	}
	if (!strcmp(op, "RESIZE")) {
		if (c)
			do_resize(c, fields, nf);
		return;
	}
	if (c && c->kind != K_NONE) {
		send_error(ch, EBUSY, NULL, "channel in use");
		return;
	}
	if (!c)
		c = new_chan(ch);
	if (!strcmp(op, "EXEC"))
		do_exec(c, fields, nf);
	else if (!strcmp(op, "WAIT"))
		do_wait(c, fields, nf);
	else if (!strcmp(op, "SIGNAL"))
		do_signal(c, fields, nf);
	else if (!strcmp(op, "PS"))
		do_ps(c);
	else if (!strcmp(op, "PING"))
		send_simple(ch, "PONG");
	else if (!strcmp(op, "FREEZE") || !strcmp(op, "THAW"))
		do_freeze(c, !strcmp(op, "FREEZE"));
	else if (!strcmp(op, "DIAL"))
		do_dial(c, fields, nf);
	else if (!strcmp(op, "SYNC")) {
		sync();
		send_simple(ch, "OK");
	} else if (!strcmp(op, "SETTLE")) {
		/* Before a snapshot (internal/backend/vm/microvm's templates): what the
		 * agent would do on its first idle moment is done now, so no
		 * clone does it again. */
		if (later_due)
			load_later();
		sync();
		send_simple(ch, "OK");
	} else if (!strcmp(op, "IDENT"))
		do_ident(ch, fields, nf); else if (!path)
		send_error(ch, EINVAL, NULL, "unknown op or missing path");
	else if (!strcmp(op, "STAT"))
		reply_stat(ch, path);
	else if (!strcmp(op, "LIST"))
		do_list(c, path);
	else if (!strcmp(op, "READ"))
		do_read(c, path);
	else if (!strcmp(op, "WRITE"))
		do_write_open(c, fields, nf, path);
	else if (!strcmp(op, "MKDIR")) {
		unsigned long long mode = 0755;
		const char *v = field(fields, nf, "mode"), *par = field(fields, nf, "parents");
		char *p = strdup(path);
		if (v && parse_uint(v, 07777, &mode))
			send_error(ch, EINVAL, NULL, "bad mode");
		else if ((par && !strcmp(par, "1")) ? mkdir_parents(p, (mode_t)mode) < 0 : mkdir(p, (mode_t)mode) < 0)
			send_error(ch, errno, NULL, NULL);
		else
			reply_stat(ch, path);
		free(p);
	} else if (!strcmp(op, "REMOVE")) {
		const char *r = field(fields, nf, "recursive");
		struct stat st;
		int rc;
		if (lstat(path, &st) < 0)
			rc = -1;
		else if (!S_ISDIR(st.st_mode))
			rc = unlink(path);
		else if (r && !strcmp(r, "1"))
			rc = nftw(path, rm_one, 64, FTW_DEPTH | FTW_PHYS);
		else
			rc = rmdir(path);
		if (rc < 0)
			send_error(ch, errno, NULL, NULL);
		else
			send_simple(ch, "OK");
	} else if (!strcmp(op, "RENAME")) {
		const char *to = field(fields, nf, "to");
		if (!to)
			send_error(ch, EINVAL, NULL, "rename without to");
		else if (rename(path, to) < 0)
			send_error(ch, errno, NULL, NULL);
		else
			send_simple(ch, "OK");
	} else
		send_error(ch, EINVAL, NULL, "unknown op");
}

static void handle_frame(int type, uint32_t ch, char *d, size_t n)
{
	struct chan *c = find_chan(ch);
	switch (type) {
	case T_HELLO:
		mark("hello");
		while (chans)
			free_chan(chans);
		frame(T_HELLO, 0, 0, d, n);
		break;
	case T_REQ:
		handle_req(ch, d, n);
		break;
	case T_DATA:
		if (!c)
			break;
		if (c->kind == K_PROC && c->idx >= 0) {
			buf_add(&procs[c->idx].inbuf, d, n);
			write_stdin(&procs[c->idx]);
		} else if (c->kind == K_DIAL) {
			buf_add(&c->out, d, n);
			dial_write(c);
		} else if (c->kind == K_WRITE)
			write_data(c, d, n);
		break;
	case T_EOF:
		if (!c)
			break;
		if (c->kind == K_PROC && c->idx >= 0) {
			procs[c->idx].in_eof = 1;
			write_stdin(&procs[c->idx]);
		} else if (c->kind == K_DIAL) {
			c->eof |= 1;
			dial_write(c);
		} else if (c->kind == K_WRITE)
			write_done(c);
		break;
	case T_CLOSE:
		if (c)
			free_chan(c);
		break;
	}
}

/* port_read reads what the port has and handles every whole frame; a bad
 * header drops bytes until the next magic (resynchronisation after a host
 * died mid-frame). Returns 0 when the host is gone. */
static int port_read(void)
{
	static char b[65536];
	ssize_t n = read(port, b, sizeof b);
	if (n == 0)
		return 0;
	if (n < 0)
		return errno == EAGAIN || errno == EINTR;
	buf_add(&rbuf, b, (size_t)n);
	while (rbuf.len >= HDR) {
		unsigned char *h = (unsigned char *)rbuf.p;
		uint32_t ch = 0, len = 0;
		for (int i = 0; i < 4; i++) {
			ch |= (uint32_t)h[4 + i] << (8 * i);
			len |= (uint32_t)h[8 + i] << (8 * i);
		}
		if (h[0] != (MAGIC & 0xff) || h[1] != (MAGIC >> 8) || h[2] < T_HELLO || h[2] > T_CLOSE || len > MAX_FRAME) {
			buf_drop(&rbuf, 1);
			continue;
		}
		if (rbuf.len < HDR + len)
			break;
		char *d = xmalloc(len + 1);
		memcpy(d, rbuf.p + HDR, len);
		d[len] = 0;
		int type = h[2];
		buf_drop(&rbuf, HDR + len);
		connected = ever_connected = 1;
		handle_frame(type, ch, d, len);
		free(d);
	}
	return 1;
}

static int open_port(int wait)
{
	char dev[300];
	if (find_dev("/sys/class/virtio-ports", "name", "dsec.agent", dev, sizeof dev, wait) < 0)
		return -1;
	return open(dev, O_RDWR | O_NONBLOCK | O_CLOEXEC);
}

static int port_has_data(void)
{
	struct pollfd q = {port, POLLIN, 0};
	return poll(&q, 1, 0) == 1 && (q.revents & POLLIN);
}

static void __attribute__((noreturn)) serve(void)
{
	struct pollfd *pf = xmalloc(sizeof *pf * (MAX_PROCS * 3 + 1024));
	void **who = xmalloc(sizeof *who * (MAX_PROCS * 3 + 1024));
	int *what = xmalloc(sizeof *what * (MAX_PROCS * 3 + 1024));

	for (;;) {
		if (!connected && port_has_data()) {
			/* A host is waiting (its HELLO is there): serve it now. */
			rbuf.len = 0;
			ever_connected = 1;
			if (!port_read())
				connected = 0;
			flush();
			continue;
		}
		int n = 0, up = connected;
		pf[n] = (struct pollfd){port, POLLIN, 0};
		who[n] = NULL;
		what[n++] = 0;
		pf[n] = (struct pollfd){sigfd, POLLIN, 0};
		who[n] = NULL;
		what[n++] = 5;
		for (int i = 0; i < nprocs && n < MAX_PROCS * 3; i++) {
			struct proc *p = &procs[i];
			if (!p->used || !p->running)
				continue;
			for (int s = 0; s < 2; s++) {
				int fd = p->ptm >= 0 && s == 0 ? p->ptm : (p->ptm >= 0 ? -1 : p->out[s]);
				if (fd == p->ptm && p->tag && !p->ch)
					fd = -1; /* a detached terminal keeps its output for the next attach */
				if (fd >= 0) {
					pf[n] = (struct pollfd){fd, POLLIN, 0};
					who[n] = p;
					what[n++] = s + 1;
				}
			}
			int in = p->ptm >= 0 ? p->ptm : p->in;
			if (in >= 0 && p->inbuf.len) {
				pf[n] = (struct pollfd){in, POLLOUT, 0};
				who[n] = p;
				what[n++] = 3;
			}
		}
		for (struct chan *c = chans; c && n < MAX_PROCS * 3 + 1000; c = c->next)
			if (c->kind == K_DIAL && c->fd >= 0) {
				short ev = (c->eof & 2 ? 0 : POLLIN) | (c->out.len ? POLLOUT : 0);
				if (!ev)
					continue;
				pf[n] = (struct pollfd){c->fd, ev, 0};
				who[n] = c;
				what[n++] = 4;
			}
		/* While no host is connected the port reports POLLHUP at once:
		 * look at it again every 50 ms only (every 2 ms until the first
		 * host has connected: at boot it is already waiting). */
		if (!up)
			pf[0].fd = -1;
		int timeout = up ? 1000 : ever_connected ? 50 : 2;
		if (later_due)
			timeout = up && first_exit ? 20 : timeout < 100 ? timeout : 100;
		int r = poll(pf, (nfds_t)n, timeout);
		if (later_due && ((r == 0 && up && first_exit) || since_boot() - ready_at > 2000))
			load_later();
		if (!up) {
			if (port_has_data()) {
				rbuf.len = 0;
				up = 1;
				ever_connected = 1;
				if (!port_read())
					connected = 0;
			}
		}
		struct signalfd_siginfo si;
		while (read(sigfd, &si, sizeof si) > 0)
			;
		reap();
		if (r <= 0) {
			flush();
			continue;
		}
		if (up && pf[0].revents) {
			if ((pf[0].revents & POLLIN) && !port_read()) {
				connected = 0;
				rbuf.len = 0;
			} else if ((pf[0].revents & POLLHUP) && !(pf[0].revents & POLLIN)) {
				connected = 0;
				rbuf.len = 0;
			}
		}
		for (int i = 1; i < n; i++) {
			if (!pf[i].revents)
				continue;
			if (what[i] == 5)
				continue; /* drained before reap() */
			if (what[i] == 4) {
				struct chan *c = who[i];
				if (find_chan(c->id) != c)
					continue;
				if (pf[i].revents & (POLLIN | POLLHUP | POLLERR))
					dial_read(c);
				if (pf[i].revents & POLLOUT)
					dial_write(c);
				continue;
			}
			struct proc *p = who[i];
			if (!p->used || !p->running)
				continue;
			if (what[i] == 3)
				write_stdin(p);
			else
				pump(p, what[i] - 1);
		}
		flush();
		if (tracing && procs_done)
			trace_dump();
	}
}

static void floor_mode(const char *mode)
{
	int fd = open("/dev/console", O_WRONLY);
	if (fd < 0)
		fd = open("/dev/ttyS0", O_WRONLY);
	char msg[64];
	int l = tracing ? snprintf(msg, sizeof msg, "DSEC-%s-OK init=%ld\n", mode, since_boot())
			: snprintf(msg, sizeof msg, "DSEC-%s-OK\n", mode);
	if (fd >= 0 && write(fd, msg, (size_t)l) < 0)
		_exit(1);
	/* The marker must leave the UART before the power goes off (without
	 * this the line was lost now and then, failing a floor boot). */
	if (fd >= 0)
		tcdrain(fd);
	reboot(RB_POWER_OFF);
	_exit(0);
}

/* grow_root grows the root file system (ext4, online) to its whole block
 * device: the fullvm host sizes each sandbox's disk overlay by disk_bytes
 * over a base image whose file system is just big enough for its files. */
static void grow_root(void)
{
	struct stat st;
	struct statfs sf;
	char p[96], b[32] = {0};
	if (stat("/", &st) < 0 || statfs("/", &sf) < 0 || sf.f_type != 0xEF53 || sf.f_bsize <= 0)
		return;
	snprintf(p, sizeof p, "/sys/dev/block/%u:%u/size", major(st.st_dev), minor(st.st_dev));
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, b, sizeof b - 1);
	close(fd);
	if (n <= 0)
		return;
	uint64_t blocks = strtoull(b, NULL, 10) * 512 / (uint64_t)sf.f_bsize;
	if (blocks <= (uint64_t)sf.f_blocks)
		return;
	fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	/* EXT4_IOC_RESIZE_FS = _IOW('f', 16, __u64) */
	if (ioctl(fd, _IOW('f', 16, uint64_t), &blocks) < 0)
		logf_("grow root to %llu blocks: %s", (unsigned long long)blocks, strerror(errno));
	else
		logf_("root grown to %llu blocks", (unsigned long long)blocks);
	close(fd);
}

/* open_channel: SIGCHLD through a signalfd, the request field table and the
 * host's virtio port; what both ways of starting (init, service) need before
 * serve(). */
static void open_channel(void)
{
	signal(SIGPIPE, SIG_IGN);
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	sigfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
	fields = xmalloc(sizeof(char *) * MAX_FIELDS);
	if (port < 0)
		port = open_port(1);
	if (port < 0)
		die("virtio port dsec.agent not found");
}

/* --service: a service of the guest's own init (the fullvm backend's
 * systemd unit), on a root file system that is already up: no mounts, no
 * root switch, no floor mode; the agent adopts orphans as a subreaper. */
static void __attribute__((noreturn)) serve_as_service(void)
{
	as_service = 1;
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	grow_root();
	mkdir(SANDBOX_CG, 0755);
	open_channel();
	printf("DSEC-AGENT-READY (service)\n");
	fflush(stdout);
	serve();
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--service"))
		serve_as_service();
	mkdir("/dev", 0755);
	mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
	int cfd = open("/dev/console", O_RDWR);
	if (cfd >= 0) {
		dup2(cfd, 1);
		dup2(cfd, 2);
		if (cfd > 2)
			close(cfd);
	}
	xmount("proc", "/proc", "proc", 0, "");
	xmount("sysfs", "/sys", "sysfs", 0, "");
	int fd = open("/proc/cmdline", O_RDONLY);
	if (fd >= 0) {
		ssize_t n = read(fd, cmdline, sizeof cmdline - 1);
		cmdline[n > 0 ? n : 0] = 0;
		close(fd);
	}
	tracing = param("dsec.trace") ? atoi(param("dsec.trace")) : 0;
	mark("init");

	const char *mode = param("dsec.mode");
	if (mode && (!strcmp(mode, "floor") || !strcmp(mode, "probe")))
		floor_mode(mode);
	setup_root();
	open_channel();
	mark("ready");
	ready_at = since_boot();
	later_due = 1;

	serve();
}

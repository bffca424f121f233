package fncall

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dsec-dev/dsec/internal/testwait"
	"github.com/dsec-dev/dsec/pkg/api"
)

func cCall(src, stdin string, l api.FnCallLimits) api.FnCallRequest {
	return api.FnCallRequest{Language: api.LangC, Files: map[string]string{"main.c": src}, Limits: l,
		Tests: []api.FnCallTest{{Stdin: stdin}}}
}

func mustCall(t *testing.T, e *Engine, req api.FnCallRequest) api.FnCallResult {
	t.Helper()
	res, err := e.Call(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tests) == 0 {
		t.Fatalf("no test results: %+v %+v", res, res.Compile)
	}
	return res
}

// leaver leaves traces everywhere a run can write: /w, /tmp, /dev/shm, SysV
// shared memory and message queues.
const leaver = `#include <stdio.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/msg.h>
#include <sys/stat.h>
int main(void) {
	FILE *f = fopen("/w/secret", "w"); if (f) { fputs("s", f); fclose(f); }
	f = fopen("/tmp/secret", "w"); if (f) { fputs("s", f); fclose(f); }
	mkdir("/w/shm", 0777);
	f = fopen("/dev/shm/secret", "w"); if (f) { fputs("s", f); fclose(f); }
	int id = shmget(0x5ec2e7, 4096, IPC_CREAT | 0666);
	int q = msgget(0x5ec2e7, IPC_CREAT | 0666);
	printf("%d %d\n", id >= 0, q >= 0);
	return 0;
}
`

// prober looks for them and for any other process.
const prober = `#include <stdio.h>
#include <dirent.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/msg.h>
#include <unistd.h>
#include <ctype.h>
int main(void) {
	const char *paths[] = {"/w/secret", "/tmp/secret", "/dev/shm/secret", "/w/shm/secret"};
	for (int i = 0; i < 4; i++) if (access(paths[i], F_OK) == 0) printf("found %s\n", paths[i]);
	if (shmget(0x5ec2e7, 0, 0) >= 0) puts("found shm");
	if (msgget(0x5ec2e7, 0) >= 0) puts("found msg queue");
	DIR *d = opendir("/proc"); struct dirent *e; int procs = 0;
	while (d && (e = readdir(d))) if (isdigit((unsigned char)e->d_name[0])) procs++;
	if (procs != 2) printf("%d processes visible\n", procs); /* this one and the pid-1 helper */
	puts("clean");
	return 0;
}
`

func TestNothingVisibleToTheNextRun(t *testing.T) {
	e := testEngine(t)
	// Enough leaver runs to use every slot, then probes (sequential and concurrent).
	var wg sync.WaitGroup
	for range 2 * e.cfg.Zygotes * e.cfg.SlotsPerZygote {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := mustCall(t, e, cCall(leaver, "", api.FnCallLimits{}))
			if res.Verdict != api.VerdictAccepted || res.Tests[0].Stdout != "1 1\n" {
				t.Errorf("leaver: %+v", res.Tests[0])
			}
		}()
	}
	wg.Wait()
	for range 2 * e.cfg.Zygotes * e.cfg.SlotsPerZygote {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := mustCall(t, e, cCall(prober, "", api.FnCallLimits{}))
			if res.Verdict != api.VerdictAccepted || res.Tests[0].Stdout != "clean\n" {
				t.Errorf("prober: %+v", res.Tests[0])
			}
		}()
	}
	wg.Wait()
}

// procsNamed returns the host pids of the processes whose name (comm) is name.
func procsNamed(name string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err == nil && strings.TrimSpace(string(b)) == name {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitProcsNamed waits up to d for at least n processes named name and returns
// their pids; it fails the test if there are fewer by then.
func waitProcsNamed(t *testing.T, name string, n int, d time.Duration) []int {
	t.Helper()
	var pids []int
	if !testwait.Until(d, func() bool { pids = procsNamed(name); return len(pids) >= n }) {
		t.Fatalf("fewer than %d processes named %s within %s", n, name, d)
	}
	return pids
}

// uniqueName is a process name (at most 15 bytes) no other test run uses.
func uniqueName(prefix string) string {
	return prefix + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
}

// TestConcurrentRunsIsolated: while one run holds files, processes and an
// abstract unix socket, another sees none of them. The holder names itself once
// it holds everything (the test sees the name in the host's /proc) and holds
// until the test, done probing, sends it SIGUSR1.
func TestConcurrentRunsIsolated(t *testing.T) {
	e := testEngine(t)
	name := uniqueName("dsechold")
	holder := `#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
static volatile sig_atomic_t done;
static void on_usr1(int sig) { (void)sig; done = 1; }
int main(void) {
	sigset_t usr1, old;
	sigemptyset(&usr1); sigaddset(&usr1, SIGUSR1);
	sigprocmask(SIG_BLOCK, &usr1, &old);
	struct sigaction sa = {.sa_handler = on_usr1}; sigaction(SIGUSR1, &sa, NULL);
	FILE *f = fopen("/w/secret", "w"); fputs("s", f); fclose(f);
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX}; memcpy(a.sun_path, "\0dsec-probe", 11);
	if (bind(s, (struct sockaddr *)&a, sizeof(sa_family_t) + 11) || listen(s, 1)) { puts("bind failed"); return 1; }
	if (fork() == 0) { sleep(30); return 0; }
	prctl(PR_SET_NAME, "HOLDERNAME");
	while (!done) sigsuspend(&old);
	puts("held");
	return 0;
}
`
	holder = strings.Replace(holder, "HOLDERNAME", name, 1)
	probe := `#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>
int main(void) {
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX}; memcpy(a.sun_path, "\0dsec-probe", 11);
	if (connect(s, (struct sockaddr *)&a, sizeof(sa_family_t) + 11) == 0) puts("connected");
	if (access("/w/secret", F_OK) == 0) puts("found file");
	if (kill(3, 0) == 0 || kill(4, 0) == 0) puts("saw a process");
	puts("clean");
	return 0;
}
`
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		res := mustCall(t, e, cCall(holder, "", api.FnCallLimits{WallTimeMs: 60000}))
		if res.Verdict != api.VerdictAccepted || res.Tests[0].Stdout != "held\n" {
			t.Errorf("holder: %+v", res.Tests[0])
		}
	}()
	mustCall(t, e, cCall(probe, "", api.FnCallLimits{})) // compile while the holder starts
	pids := waitProcsNamed(t, name, 1, 30*time.Second)
	for range 8 {
		res := mustCall(t, e, cCall(probe, "", api.FnCallLimits{}))
		if res.Verdict != api.VerdictAccepted || res.Tests[0].Stdout != "clean\n" {
			t.Errorf("probe: %+v", res.Tests[0])
		}
	}
	if now := procsNamed(name); len(now) == 0 {
		t.Errorf("the holder ended before the probes were done")
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGUSR1)
	}
	wg.Wait()
}

// TestForkBombContained: a fork bomb hits its own limits; runs beside it, while
// it forks (its processes seen in the host's /proc), are accepted.
func TestForkBombContained(t *testing.T) {
	e := testEngine(t)
	name := uniqueName("dsecbomb")
	const limit = 32
	bomb := cCall("#include <sys/prctl.h>\n#include <unistd.h>\nint main(void){prctl(PR_SET_NAME, \""+name+"\");for(;;)fork();}\n",
		"", api.FnCallLimits{CPUTimeMs: 1000, WallTimeMs: 3000, Processes: limit})
	hello := cCall("#include <stdio.h>\nint main(void){puts(\"ok\");return 0;}\n", "", api.FnCallLimits{})
	want := "ok\n"
	hello.Tests[0].ExpectedOutput = &want
	mustCall(t, e, hello)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		res := mustCall(t, e, bomb)
		if res.Verdict != api.VerdictTimeLimit {
			t.Errorf("bomb: %s %+v", res.Verdict, res.Tests[0])
		}
	}()
	// The bomb has forked past a few processes; never past its limit.
	waitProcsNamed(t, name, 8, 30*time.Second)
	beside := 0
	for range 10 {
		if n := len(procsNamed(name)); n > limit {
			t.Errorf("%d bomb processes, limit %d", n, limit)
		} else if n > 0 {
			beside++
		}
		if res := mustCall(t, e, hello); res.Verdict != api.VerdictAccepted {
			t.Errorf("neighbour of the bomb: %+v", res.Tests[0])
		}
	}
	if beside == 0 {
		t.Errorf("no neighbour started while the bomb ran")
	}
	wg.Wait()
}

// TestCanceledIsSystemError: a call canceled by its caller is never blamed on the
// program, and it ends at once.
func TestCanceledIsSystemError(t *testing.T) {
	e := testEngine(t)
	req := api.FnCallRequest{Language: api.LangBash, Files: map[string]string{"main.sh": "sleep 30"},
		Limits: api.FnCallLimits{WallTimeMs: 20000}, Tests: []api.FnCallTest{{}}}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	res, err := e.Call(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != api.VerdictSystemError || time.Since(t0) > 5*time.Second {
		t.Fatalf("%s after %v: %+v", res.Verdict, time.Since(t0), res.Tests)
	}
}

// TestManyTestsOneCall runs a call with many tests (in parallel over the pool).
func TestManyTestsOneCall(t *testing.T) {
	e := testEngine(t)
	req := api.FnCallRequest{Language: api.LangPython3, Files: map[string]string{"main.py": "print(int(input()) * 2)"}}
	for i := range 50 {
		want := strconv.Itoa(2*i) + "\n"
		req.Tests = append(req.Tests, api.FnCallTest{Stdin: strconv.Itoa(i) + "\n", ExpectedOutput: &want})
	}
	res := mustCall(t, e, req)
	if res.Verdict != api.VerdictAccepted || len(res.Tests) != 50 {
		t.Fatalf("%s, %d tests: %+v", res.Verdict, len(res.Tests), res.Tests[0])
	}
}

// sessionProbe prints the program's session and process group as its pid
// namespace sees them: 0 means the leader is outside the namespace (the
// zygote's or the engine's session).
const sessionProbe = `#include <stdio.h>
#include <unistd.h>
int main(void) { printf("%d %d\n", (int)getsid(0), (int)getpgid(0)); return 0; }
`

// TestProgramSessionApart: a program runs in a session of its sandbox's own
// (its helper's, made while the slot was prepared), never in the zygote's.
func TestProgramSessionApart(t *testing.T) {
	e := testEngine(t)
	for range 3 {
		res := mustCall(t, e, cCall(sessionProbe, "", api.FnCallLimits{}))
		if res.Verdict != api.VerdictAccepted || res.Tests[0].Stdout != "1 1\n" {
			t.Fatalf("session, process group = %q, want the sandbox's own (1 1): %+v", res.Tests[0].Stdout, res.Tests[0])
		}
	}
}

// rtProbe prints the program's scheduling policy, then whether it can make
// itself real-time.
const rtProbe = `#include <errno.h>
#include <sched.h>
#include <stdio.h>
int main(void) {
	struct sched_param p = {.sched_priority = 1};
	int policy = sched_getscheduler(0);
	int r = sched_setscheduler(0, SCHED_FIFO, &p);
	printf("%d %d %d\n", policy, r, r ? errno : 0);
	return 0;
}
`

// TestProgramIsNotRealTime: the helper is real-time while it waits for the
// program (see csrc/fncall), the program never is (SCHED_OTHER, reset on
// fork) and cannot make itself real-time.
func TestProgramIsNotRealTime(t *testing.T) {
	e := testEngine(t)
	res := mustCall(t, e, cCall(rtProbe, "", api.FnCallLimits{}))
	if res.Verdict != api.VerdictAccepted || res.Tests[0].Stdout != "0 -1 1\n" {
		t.Fatalf("policy, sched_setscheduler(SCHED_FIFO), errno = %q, want SCHED_OTHER and EPERM (0 -1 1): %+v", res.Tests[0].Stdout, res.Tests[0])
	}
}

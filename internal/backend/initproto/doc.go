// Package initproto starts dsec-init, the small C PID 1 of a container sandbox
// (csrc/init), and speaks its control protocol.
//
// Spawn clones the init into new mount, PID, UTS, IPC and network namespaces;
// the init builds the overlay root, drops privileges, reports readiness and then
// serves a unix SOCK_SEQPACKET socket. Processes inside the sandbox are started
// by the init itself (fork+exec from inside), so no setns helper is needed.
//
// A sandbox makes four superblocks of its own (overlay root, the tmpfs of the
// writable layer, which also holds /dev, /dev/shm and the empty directory
// over masked directories, proc and devpts): every superblock costs
// per-memcg shrinker memory on the host. /sys is a clone of one read-only
// sysfs shared by all sandboxes (MountSharedSysfs, SpawnConfig.SysfsPath).
//
// Protocol: every packet is a sequence of NUL-terminated strings, the op first
// and then key=value fields; requests are at most MaxPacket bytes.
//
//	EXEC arg=.. (1+) env=.. cwd= uid= gid= groups=1,2 tag= tty=1   + 3 fds (SCM_RIGHTS)
//	    -> STARTED pid=N | ERROR errno=N msg=.. [step=setgroups|setresuid|chdir|exec|..]
//	    later, on the same connection: EXITED pid= status= utime_us= stime_us= maxrss_kb=
//	    tty=1: the fds are a terminal slave; the child becomes a session leader
//	    with it as controlling terminal (TIOCSCTTY). A 4th fd, allowed with
//	    tag and tty=1, is the terminal's master: the init keeps it with the
//	    tag's record and passes it back on WAIT.
//	KILL sig=N        signals the connection's process group; no reply
//	WAIT tag=T        -> EXITED.. | RUNNING pid=N (then EXITED later) | ERROR errno=3
//	                  (tty=1 and the kept master fd when the process has one)
//	SIGNAL tag=T sig=N -> OK | ERROR
//	PS                -> PS proc=TAG:PID:RUNNING.. [more=1: another PS packet follows]
//	PING              -> PONG
//
// An ERROR reply to EXEC with a step field means the process itself failed to
// start (ExecError); without one the request was refused (RemoteError).
// A connection carries at most one process at a time (started by EXEC or
// attached by WAIT); once its EXITED was sent, the connection may EXEC again
// (inits before that answer EBUSY, see Conn.Reusable).
// Closing a connection never kills its process; exits of tagged processes are
// kept (the last 4096) for a later WAIT.
package initproto

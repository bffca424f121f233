// Package trajectory is dsec's trajectory log: it lets an RL trainer that was
// preempted mid-rollout resume by re-issuing the same agent steps, which dsec
// answers from the log (fast-forward) instead of running them again, and then
// continue live at the first new step.
//
// # The decorator
//
// Wrap(inner session.Service, store, opts) returns a session.Service (serving
// the session.Trajectories group itself; Interceptor is the same for
// session.Chain) that every front end calls. A front end tags an operation as step N of a trajectory with
// session.WithStep (the /v1 front end parses the headers
//
//	X-Dsec-Trajectory: ID     (1-128 of A-Z a-z 0-9 . _ : -)
//	X-Dsec-Step: N            (1, 2, ...)
//
// with ParseHeaders) and reads StepOutcome.Replayed to tell its client (/v1:
// X-Dsec-Replayed: true). Steps are: Exec, ExecStream, StartProcess, on an FS
// opened with a tagged context Open (read_file), WriteFile, ExtractTar
// (upload_archive), Mkdir and Remove, HTTP (a request to a sandbox port, sent by
// the decorator over the inner service's Dial) and FnCall. Every other operation,
// and every untagged one, passes through. The Go client tags calls made with
// client.WithTrajectory(ctx, id, n); the CLI has `dsec exec --traj ID --step N`.
// A trajectory is bound to the sandbox of its first step. Package trajtest is the
// decorator's conformance suite (run over the node agent on the mock driver
// with every store, and over the agent on the container driver).
//
// # What is logged
//
// Per step: a fingerprint (sha256 over the operation name and the JSON of its
// normalised arguments: the server's defaults applied, map keys sorted, paths
// cleaned, bodies such as stdin, file contents, tar uploads and HTTP request
// bodies replaced by their sha256; for HTTP only method, port, path+query,
// Content-Type and body count), the normalised arguments, the request body when
// at most 16 MiB (a rebuild needs it), the typed result (Outcome: the exec
// result, a stream's started PID, output events and exit result, the process, the
// file info and bytes read, the HTTP status, headers and body, the FnCall result,
// or the classified error that was the step's result; kept as JSON, at most 16
// MiB of data: a larger answer is kept as sha256 and size only and cannot be
// replayed), timing, the sandbox and the state (started, finished; "unknown" is
// shown for a step that was started by an earlier server process or whose
// operation crashed). Logs written before the decorator hold the raw /v1 answer
// (status, headers, body: Result.Format FormatHTTP); Result.Outcome decodes both
// forms, so such logs replay, show and rebuild as before (tested on a fixture in
// testdata/legacy-v1).
//
// Durability: the step is recorded as started before it runs, without waiting
// for an fsync (it must survive a crash of the server process, which the page
// cache ensures; a host crash ends the sandbox too, so the trajectory is then
// rebuilt from its finished steps), and as finished (fsync'd) before its answer
// is returned. For exec/stream, output flows live and ExecStream returns (so the
// front end sends its final exit event) once the step is logged. An answer over
// 16 MiB (a large file read or HTTP response) is passed to the caller as it
// comes and logged at its end, as a hash.
//
// In the Pebble store (the default) the started mark is committed with a WAL
// sync request, and Begin returns when the WAL writer has written it to the WAL
// file: the file system wrapper lazyWALFS skips every fsync the WAL writer asks
// for (a Pebble NoSync write would stay in the writer's memory until the next
// sync), so a Begin never waits for a disk flush. Finish then waits for a group
// fsync of its own, one for every durable write waiting, which also covers the
// marks before it; WAL files are recycled, so the fsync is usually of
// preallocated space. A power loss can tear the WAL (a later block on disk, an
// earlier unsynced one lost) in a way Pebble reads as corruption, since its
// records claim the skipped syncs; OpenPebble then cuts each torn WAL file at
// its first unreadable record, which only drops writes no answer rests on
// (walrepair.go; tested on Pebble's strict in-memory file system,
// powerloss_test.go). In the bbolt store
// every commit is fsync'd, the started mark's too (a bbolt commit without fsync
// can leave, after a power loss, a file bbolt cannot open, or damage the last
// fsync'd state; tested at the file level in boltloss_test.go), a file is
// checked before bbolt opens it and a damaged one refused with ErrBoltDamaged
// (boltcheck.go: bbolt panics or faults on such files), and commits are
// grouped: one committer goroutine writes every update queued while the
// previous transaction was being fsync'd in the next transaction, so a lone
// step pays one commit per record and concurrent steps share them.
//
// # Replay rules (Decide)
//
//   - step N of a new trajectory must be 1; N > last logged + 1 is a gap
//     (400 invalid_argument);
//   - N already logged with another fingerprint: 409 trajectory_diverged,
//     naming the step and both fingerprints;
//   - N finished with the same fingerprint: its logged result, with
//     StepOutcome.Replayed set (and Replayed in exec and exec/stream results),
//     without touching the sandbox — even if the sandbox is gone;
//   - N running now (same step sent twice at once): 409 conflict;
//   - N started but never finished (the server died while it ran): 409
//     outcome_unknown. It is never run again and never resolved: the client
//     moves on, and step N+1 runs live (the rule is "unknown steps stay unknown;
//     the next step may proceed"). The command may or may not have taken
//     effect (a killed server does not kill the commands it started);
//   - otherwise (N == last + 1) the step runs live in the bound sandbox.
//
// Live steps run to completion even if the client disconnects (except
// exec/stream, whose I/O needs the client: a client gone mid-stream leaves the
// step unknown), so that a preempted trainer finds the answer in the log. The
// decision comes from the operation's classified error (errdefs code): a step
// whose operation fails with a retryable dsec error (internal, unavailable,
// resource_exhausted, deadline_exceeded) is not logged and may be re-issued;
// other errors (a missing file, bad_gateway, ...) are results and are logged
// and replayed like any other.
//
// # Lost sandboxes and rebuild
//
// If the bound sandbox no longer exists or its init died, live steps fail with
// 410 trajectory_sandbox_lost (infrastructure, not retryable) and are not
// logged; replays still answer. POST /v1/trajectories/{id}/rebuild (`dsec traj
// rebuild ID`) is the opt-in remedy: it creates a sandbox with the parameters
// recorded at the first step (image, cpu, memory, disk, pids, env, labels, idle
// timeout, TTL), re-executes the finished mutating steps in order (exec,
// exec/stream, process start, file write, archive upload, mkdir, remove; reads
// and HTTP are skipped, and so are unknown steps and writes whose body was over
// 16 MiB), reports for each whether its result matched the log (exec: exit
// code, stdout, stderr; others: success or the same error code), and binds the new
// sandbox to the trajectory (RebuildTrajectory). The log keeps the original results. Replays may still name the old
// sandbox; live steps must name the new one (409 conflict otherwise).
//
// # Reading and retention
//
//	GET    /v1/trajectories                 list (dsec traj ls)
//	GET    /v1/trajectories/{id}            steps with results (dsec traj show ID [--json])
//	GET    /v1/trajectories/{id}/export     JSON lines, one step per line (dsec traj export ID)
//	DELETE /v1/trajectories/{id}            (dsec traj rm ID)
//	POST   /v1/trajectories/{id}/rebuild    (dsec traj rebuild ID)
//
// `dsec server --traj-max-age 168h --traj-max 100000` (the defaults) delete
// trajectories not updated for a week and keep at most the 100,000 most
// recently updated, checked at start and every 10 minutes.
//
// # Storage
//
// Store is the interface (Begin, Finish, Abort, Get, List, Delete, Rebind,
// Prune). Pebble, on github.com/cockroachdb/pebble at DATA_DIR/trajectories/
// (4 MiB memtables, 8 MiB block cache), is the node's default; Bolt, on
// go.etcd.io/bbolt at DATA_DIR/trajectories.db, is chosen by `dsec server
// --traj-store bolt`. A Pebble node that finds a trajectories.db copies its
// trajectories once (OpenNode) and renames it trajectories.db.migrated. Mem is
// an in-memory store for tests. Both on-disk stores keep Meta and Step records as
// JSON (record.go) with the bodies apart. Package storetest is the conformance
// suite every implementation must pass. A step "in flight"
// is one started by the current store instance (its boot ID); a distributed
// implementation would replace the boot ID by a lease.
package trajectory

// Package e2b is dsec's E2B front end: the control-plane REST API of E2B
// (create, connect, list, kill, timeouts, pause) and the envd API that E2B's SDKs
// talk to inside a sandbox (the Connect-protocol services process.Process and
// filesystem.Filesystem, GET/POST /files and /health), served on dsec's own
// listener so that unmodified E2B code works with E2B_API_URL and E2B_SANDBOX_URL
// pointed at dsec.
//
// It is a thin mapping onto a session.Service, and keeps no sandbox state of
// its own, so any number of API servers serve the same sandboxes: templates
// name dsec images, metadata lives in the sandbox's labels, files go through
// session.FS, and what E2B keeps inside envd is the sandbox node's:
//
//   - lifecycle.go: a sandbox's deadline (timeouts that can be moved, kill or
//     pause at the end) is its session deadline (SetDeadline), which its node
//     keeps and enforces;
//   - procs.go: the processes started through Process.Start are the node's
//     background processes (their tag and configuration as labels, open input
//     for stdin and resizes); a stream follows a process's logs;
//   - watch.go: the polling directory watchers are the node's directory
//     watches; a WatchDir stream polls the sandbox's FS while it lasts.
//   - snapshots.go: a snapshot is an environment committed from its sandbox
//     (Commit), named so that the environment store's list answers E2B's
//     filters; a fork is the node's Fork.
//
// Streaming answers flush at most every 2 ms (batch.go), so a short command's
// start, end and end-of-stream leave in one write.
//
// Requests reach the envd routes by the E2b-Sandbox-Id header (E2B's SDKs send it
// with every envd call); control-plane routes are /sandboxes and /v2/sandboxes.
// Sandbox ports (ports.go) are reached as on E2B's proxy, by the host
// "PORT-SANDBOXID.DOMAIN" (create answers with the domain, so the SDK's
// getHost names dsec) or by E2b-Sandbox-Port; envd's port is this handler,
// every other port is proxied into the sandbox through session.Service.Dial.
// Internet access and network.allowOut/denyOut (egress.go) become the
// sandbox's egress policy (internal/netpolicy).
// The API key (X-API-Key, with or without E2B's "e2b_" prefix) is a dsec token;
// envd calls carry the per-sandbox access token handed out at create/connect
// (X-Access-Token), an HMAC of the sandbox ID, so no state is needed to check it.
// Errors have E2B's shapes: {code, message} on REST, Connect errors on RPCs, and
// E2B's proxy answer (502 {"sandboxId","message","code"}) when the sandbox of an
// envd call is gone, which the SDK reads as "sandbox not running".
//
// The .proto files under envdpb are dsec's own text with E2B's package, service,
// message and field names and numbers (see NOTICE); `make proto` regenerates the
// Go code.
package e2b

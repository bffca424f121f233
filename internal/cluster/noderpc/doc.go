// Package noderpc carries dsec's session service (internal/session) across a
// network, between API servers and node agents. NewHandler serves a
// session.Service (what it does not implement answers not_implemented, which
// crosses the wire like any error) as a connect-go service over HTTP/2
// without TLS (h2c; TLS optional), its unary calls as plain JSON POSTs over
// HTTP/1.1 keep-alive connections (unary.go); NewClient is a session.Service
// that forwards every call to such a handler. Streams (exec with live stdin, stdout,
// stderr and control messages, process logs, file content, tar streams,
// Dockerfile builds' contexts and logs, and dialled connections) move in chunks, never buffered whole.
//
// Errors keep their class across the wire (errdefs code, message,
// infrastructure and retryable flags, Retry-After); a transport failure
// (refused, reset, a node that went away mid stream, a peer that stopped
// answering keepalive pings) is an `unavailable` infrastructure error, never a
// hang. Every request carries an HMAC-signed, time-stamped bearer token made
// from a cluster secret (LoadSecret); a handler refuses a wrong or missing one
// with unauthenticated before it runs anything.
//
// NodeStatus is the one node-level call beyond the session service: capacity,
// load and backends, for the cluster's placement.
package noderpc

package e2b

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"path"
	"strconv"
	"strings"

	"github.com/dsec-dev/dsec/internal/errdefs"
	pb "github.com/dsec-dev/dsec/internal/frontend/e2b/envdpb/filesystem"
	"github.com/dsec-dev/dsec/internal/session"
	"github.com/dsec-dev/dsec/pkg/api"
)

// defaultUserName is the account E2B's base image runs commands and writes
// files as when a request names none (envd's default user). A sandbox whose
// image has no such account runs as root.
const defaultUserName = "user"

// maxPasswdBytes bounds the /etc/passwd read to resolve users.
const maxPasswdBytes = 4 << 20

// account is one /etc/passwd entry of a sandbox.
type account struct {
	Name     string
	UID, GID int
	Home     string
}

var rootAccount = account{Name: "root", Home: "/root"}

// isRoot says whether a is the superuser (whose files need no chown).
func (a account) isRoot() bool { return a.UID == 0 }

// parsePasswd reads /etc/passwd's entries by name.
func parsePasswd(r io.Reader) map[string]account {
	out := map[string]account{}
	sc := bufio.NewScanner(io.LimitReader(r, maxPasswdBytes))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) < 6 || f[0] == "" || strings.HasPrefix(f[0], "#") {
			continue
		}
		uid, err1 := strconv.Atoi(f[2])
		gid, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil {
			continue
		}
		home := f[5]
		if !path.IsAbs(home) {
			home = "/"
		}
		out[f[0]] = account{Name: f[0], UID: uid, GID: gid, Home: path.Clean(home)}
	}
	return out
}

// readPasswd reads sandbox's accounts through fs; a sandbox without
// /etc/passwd has none.
func readPasswd(ctx context.Context, fs session.FS) (map[string]account, error) {
	rc, _, err := fs.Open(session.WithoutStep(ctx), "/etc/passwd")
	if errdefs.Is(err, api.CodeNotFound) {
		return map[string]account{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return parsePasswd(rc), nil
}

// accounts returns sandbox's accounts, read once per sandbox (again when
// fresh is set: a user added in the sandbox since). fs may be nil: the
// sandbox's FS is then opened when the accounts must be read.
func (h *Handler) accounts(ctx context.Context, fs session.FS, sandbox string, fresh bool) (map[string]account, error) {
	h.mu.Lock()
	got, ok := h.passwd[sandbox]
	h.mu.Unlock()
	if ok && !fresh {
		return got, nil
	}
	if fs == nil {
		opened, err := h.svc.FS(session.WithoutStep(ctx), sandbox)
		if err != nil {
			return nil, err
		}
		defer opened.Close()
		fs = opened
	}
	got, err := readPasswd(ctx, fs)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.passwd[sandbox] = got
	h.mu.Unlock()
	return got, nil
}

// lookupUser resolves the user a request names (empty: the default user) to
// its account in the sandbox (fs may be nil, see accounts). A numeric user is a UID without an entry. An
// unknown name is invalid, as envd answers.
func (h *Handler) lookupUser(ctx context.Context, fs session.FS, sandbox, name string) (account, error) {
	if name == "." || name == ".." || strings.ContainsAny(name, "/:\x00") {
		return account{}, errdefs.Invalid("invalid user name %q", name)
	}
	accts, err := h.accounts(ctx, fs, sandbox, false)
	switch {
	case err != nil && tagged(ctx):
		// A trajectory step of a sandbox that is gone: its log answers it.
		accts = map[string]account{}
	case err != nil:
		return account{}, err
	}
	if name == "" {
		if a, ok := accts[defaultUserName]; ok {
			return a, nil
		}
		if a, ok := accts["root"]; ok {
			return a, nil
		}
		return rootAccount, nil
	}
	if a, ok := accts[name]; ok {
		return a, nil
	}
	if uid, err := strconv.Atoi(name); err == nil && uid >= 0 {
		for _, a := range accts {
			if a.UID == uid {
				return a, nil
			}
		}
		return account{Name: name, UID: uid, GID: uid, Home: homeOf(name)}, nil
	}
	if name == "root" {
		return rootAccount, nil
	}
	if fresh, err := h.accounts(ctx, fs, sandbox, true); err == nil {
		accts = fresh
	} else if !tagged(ctx) {
		return account{}, err
	}
	if a, ok := accts[name]; ok {
		return a, nil
	}
	if len(accts) == 0 && tagged(ctx) {
		return account{Name: name, Home: homeOf(name)}, nil // replayed: nothing to give
	}
	return account{}, errdefs.Invalid("error looking up user '%s': unknown user %s", name, name)
}

// userOfSandbox is lookupUser without an open FS.
func (h *Handler) userOfSandbox(ctx context.Context, sandbox, name string) (account, error) {
	return h.lookupUser(ctx, nil, sandbox, name)
}

// chown gives paths (and, with recursive, what is under them) to a: the node's
// file API writes as root, envd as the requesting user.
func (h *Handler) chown(ctx context.Context, sandbox string, a account, recursive bool, paths ...string) error {
	if a.isRoot() || len(paths) == 0 {
		return nil
	}
	cmd := []string{"chown"}
	if recursive {
		cmd = append(cmd, "-R")
	}
	cmd = append(cmd, "-h", fmt.Sprintf("%d:%d", a.UID, a.GID), "--")
	res, err := h.svc.Exec(session.WithoutStep(ctx), sandbox, api.ExecRequest{Cmd: append(cmd, paths...), User: "root", Cwd: "/"})
	if err != nil {
		return fmt.Errorf("give %s to %s: %w", strings.Join(paths, " "), a.Name, err)
	}
	if res.ExitCode != 0 {
		return errdefs.New(api.CodeInternal, "give %s to %s: chown exited with %d: %s", strings.Join(paths, " "), a.Name, res.ExitCode, strings.TrimSpace(res.Stderr))
	}
	return nil
}

// userEnv is env with the variables envd sets for the user (unless given).
func userEnv(env map[string]string, a account) map[string]string {
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	for k, v := range map[string]string{"HOME": a.Home, "USER": a.Name, "LOGNAME": a.Name} {
		if _, ok := out[k]; !ok {
			out[k] = v
		}
	}
	return out
}

// idNames names a sandbox's user and group IDs, as envd shows owners.
type idNames struct{ users, groups map[int]string }

// parseGroup reads /etc/group's names by GID.
func parseGroup(r io.Reader) map[int]string {
	out := map[int]string{}
	sc := bufio.NewScanner(io.LimitReader(r, maxPasswdBytes))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) < 3 || f[0] == "" {
			continue
		}
		if gid, err := strconv.Atoi(f[2]); err == nil {
			if _, dup := out[gid]; !dup {
				out[gid] = f[0]
			}
		}
	}
	return out
}

// names returns the names of sandbox's IDs (read once per sandbox); IDs it
// cannot name stay numbers.
func (h *Handler) names(ctx context.Context, fs session.FS, sandbox string) idNames {
	n := idNames{users: map[int]string{}}
	if accts, err := h.accounts(ctx, fs, sandbox, false); err == nil {
		for _, a := range accts {
			if _, dup := n.users[a.UID]; !dup || a.Name == "root" {
				n.users[a.UID] = a.Name
			}
		}
	}
	h.mu.Lock()
	groups, ok := h.groups[sandbox]
	h.mu.Unlock()
	if !ok {
		rc, _, err := fs.Open(session.WithoutStep(ctx), "/etc/group")
		if err == nil {
			groups = parseGroup(rc)
			rc.Close()
		}
		if err == nil || errdefs.Is(err, api.CodeNotFound) {
			h.mu.Lock()
			h.groups[sandbox] = groups
			h.mu.Unlock()
		}
	}
	n.groups = groups
	return n
}

// apply replaces the numeric owners and groups of es by their names.
func (n idNames) apply(es ...*pb.EntryInfo) {
	name := func(m map[int]string, id string) string {
		if v, err := strconv.Atoi(id); err == nil && m[v] != "" {
			return m[v]
		}
		return id
	}
	for _, e := range es {
		e.Owner, e.Group = name(n.users, e.Owner), name(n.groups, e.Group)
	}
}

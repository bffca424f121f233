package project

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dsec-dev/dsec/internal/datafmt"
	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/pkg/api"
)

// Local is the Store of one `dsec server`: projects and token digests persist
// in a JSON file (DATA_DIR/projects.json); reservations live in memory and are
// rebuilt from the node's sandboxes by Reconcile at start.
type Local struct {
	file string

	mu      sync.Mutex
	state   localState
	res     map[string]map[string]Reservation // project → id → reservation
	usage   map[string]Usage
	version int64
}

type localState struct {
	// Version is the file's format (datafmt.Projects).
	Version  int                     `json:"version"`
	Projects map[string]localProject `json:"projects"`
	// Tokens maps token digests to their project.
	Tokens map[string]localToken `json:"tokens"`
}

type localProject struct {
	Quota     Quota     `json:"quota"`
	CreatedAt time.Time `json:"created_at"`
	// Registries are the registry credentials by host; a change replaces
	// the map (RegistryAuth hands it out without a copy).
	Registries map[string]api.RegistryAuth `json:"registries,omitempty"`
}

type localToken struct {
	Project   string    `json:"project"`
	CreatedAt time.Time `json:"created_at"`
}

// OpenLocal opens (or creates) the state in file; adminToken is the default
// project's token (DATA_DIR/token) and is never written to file. file ""
// keeps everything in memory (tests).
func OpenLocal(file, adminToken string) (*Local, error) {
	l := &Local{file: file, res: map[string]map[string]Reservation{}, usage: map[string]Usage{},
		state: localState{Projects: map[string]localProject{}, Tokens: map[string]localToken{}}}
	if file != "" {
		b, err := os.ReadFile(file)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("project: %w", err)
		default:
			if err := json.Unmarshal(b, &l.state); err != nil {
				return nil, fmt.Errorf("project: %s: %w", file, err)
			}
			if l.state.Version > datafmt.Projects {
				return nil, fmt.Errorf("project: %w", datafmt.Newer(file, l.state.Version, datafmt.Projects))
			}
			if l.state.Projects == nil {
				l.state.Projects = map[string]localProject{}
			}
			if l.state.Tokens == nil {
				l.state.Tokens = map[string]localToken{}
			}
		}
	}
	if adminToken != "" {
		l.state.Tokens[Digest(adminToken)] = localToken{Project: Default}
	}
	return l, nil
}

// save writes the state (l.mu held).
func (l *Local) save() error {
	if l.file == "" {
		return nil
	}
	l.state.Version = datafmt.Projects
	b, err := json.MarshalIndent(l.state, "", "  ")
	if err != nil {
		return err
	}
	tmp := l.file + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return errdefs.Internal(err, "project: save")
	}
	if err := os.Rename(tmp, filepath.Clean(l.file)); err != nil {
		return errdefs.Internal(err, "project: save")
	}
	return nil
}

func (l *Local) Identify(tok string) (string, bool) {
	if tok == "" {
		return "", false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.state.Tokens[Digest(tok)]
	return t.Project, ok
}

func (l *Local) Limits(project string) (Quota, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.state.Projects[project]
	return p.Quota, ok || project == Default
}

// known reports whether name exists (l.mu held).
func (l *Local) known(name string) bool {
	_, ok := l.state.Projects[name]
	return ok || name == Default
}

func (l *Local) Create(_ context.Context, name string, q Quota) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	if err := CheckQuota(q); err != nil {
		return "", err
	}
	tok, err := NewToken()
	if err != nil {
		return "", err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.known(name) {
		return "", errdefs.New(api.CodeAlreadyExists, "project %q exists", name)
	}
	now := time.Now().UTC()
	l.state.Projects[name] = localProject{Quota: q, CreatedAt: now}
	l.state.Tokens[Digest(tok)] = localToken{Project: name, CreatedAt: now}
	if err := l.save(); err != nil {
		delete(l.state.Projects, name)
		delete(l.state.Tokens, Digest(tok))
		return "", err
	}
	return tok, nil
}

// info builds name's Info (l.mu held).
func (l *Local) info(name string) Info {
	p := l.state.Projects[name]
	in := Info{Name: name, Quota: p.Quota, CreatedAt: p.CreatedAt, Usage: l.usage[name], Registries: RegistryHosts(p.Registries)}
	for d, t := range l.state.Tokens {
		if t.Project == name {
			in.Tokens = append(in.Tokens, TokenInfo{ID: TokenID(d), CreatedAt: t.CreatedAt})
		}
	}
	sort.Slice(in.Tokens, func(i, j int) bool { return in.Tokens[i].ID < in.Tokens[j].ID })
	return in
}

func (l *Local) Get(_ context.Context, name string) (Info, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.known(name) {
		return Info{}, errdefs.NotFound("project %q not found", name)
	}
	return l.info(name), nil
}

func (l *Local) List(context.Context) ([]Info, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := []Info{l.info(Default)}
	for name := range l.state.Projects {
		if name != Default {
			out = append(out, l.info(name))
		}
	}
	sort.Slice(out[1:], func(i, j int) bool { return out[1+i].Name < out[1+j].Name })
	return out, nil
}

func (l *Local) Delete(_ context.Context, name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if name == Default {
		return errdefs.Invalid("the default project cannot be removed")
	}
	if !l.known(name) {
		return errdefs.NotFound("project %q not found", name)
	}
	if u := l.usage[name]; u.Sandboxes > 0 {
		return errdefs.Conflict("project %q still holds %d sandboxes; delete them first", name, u.Sandboxes)
	}
	old := l.state
	l.state = localState{Projects: map[string]localProject{}, Tokens: map[string]localToken{}}
	for n, p := range old.Projects {
		if n != name {
			l.state.Projects[n] = p
		}
	}
	for d, t := range old.Tokens {
		if t.Project != name {
			l.state.Tokens[d] = t
		}
	}
	if err := l.save(); err != nil {
		l.state = old
		return err
	}
	delete(l.res, name)
	delete(l.usage, name)
	return nil
}

func (l *Local) SetQuota(_ context.Context, name string, q Quota) error {
	if err := CheckQuota(q); err != nil {
		return err
	}
	return l.change(name, func(p *localProject) error {
		p.Quota = q
		return nil
	})
}

// change applies f to project name's record (the default project's is made
// on its first change) and saves it; on an error nothing changes.
func (l *Local) change(name string, f func(*localProject) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.known(name) {
		return errdefs.NotFound("project %q not found", name)
	}
	old, had := l.state.Projects[name]
	p := old
	if !had {
		p.CreatedAt = time.Now().UTC()
	}
	if err := f(&p); err != nil {
		return err
	}
	l.state.Projects[name] = p
	if err := l.save(); err != nil {
		if had {
			l.state.Projects[name] = old
		} else {
			delete(l.state.Projects, name)
		}
		return err
	}
	return nil
}

func (l *Local) AddToken(_ context.Context, name string) (string, error) {
	tok, err := NewToken()
	if err != nil {
		return "", err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.known(name) {
		return "", errdefs.NotFound("project %q not found", name)
	}
	l.state.Tokens[Digest(tok)] = localToken{Project: name, CreatedAt: time.Now().UTC()}
	if err := l.save(); err != nil {
		delete(l.state.Tokens, Digest(tok))
		return "", err
	}
	return tok, nil
}

func (l *Local) RemoveToken(_ context.Context, name, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	found, n := "", 0
	for d, t := range l.state.Tokens {
		if t.Project == name {
			n++
			if id != "" && strings.HasPrefix(d, id) {
				found = d
			}
		}
	}
	if found == "" {
		return errdefs.NotFound("project %q has no token %q", name, id)
	}
	if name == Default && n == 1 {
		return errdefs.Conflict("that is the default project's last token")
	}
	old := l.state.Tokens[found]
	delete(l.state.Tokens, found)
	if err := l.save(); err != nil {
		l.state.Tokens[found] = old
		return err
	}
	return nil
}

// RegistryAuth implements Store.
func (l *Local) RegistryAuth(project string) map[string]api.RegistryAuth {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state.Projects[project].Registries
}

func (l *Local) SetRegistryAuth(_ context.Context, name, host string, a api.RegistryAuth) error {
	host, err := CheckRegistryHost(host)
	if err != nil {
		return err
	}
	if err := CheckRegistryAuth(a); err != nil {
		return err
	}
	return l.changeRegistries(name, func(m map[string]api.RegistryAuth) error {
		m[host] = a
		return nil
	})
}

func (l *Local) RemoveRegistryAuth(_ context.Context, name, host string) error {
	h := RegistryHost(host)
	return l.changeRegistries(name, func(m map[string]api.RegistryAuth) error {
		if _, ok := m[h]; !ok {
			return errdefs.NotFound("project %q has no credentials for registry %q", name, host)
		}
		delete(m, h)
		return nil
	})
}

// changeRegistries runs f on a copy of name's registry credentials and
// stores the copy (RegistryAuth's map is never changed).
func (l *Local) changeRegistries(name string, f func(map[string]api.RegistryAuth) error) error {
	return l.change(name, func(p *localProject) error {
		m := maps.Clone(p.Registries)
		if m == nil {
			m = map[string]api.RegistryAuth{}
		}
		if err := f(m); err != nil {
			return err
		}
		p.Registries = m
		if len(m) == 0 {
			p.Registries = nil
		}
		return nil
	})
}

func (l *Local) Reserve(_ context.Context, project string, r Reservation) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.known(project) {
		return errdefs.NotFound("project %q not found", project)
	}
	if err := l.state.Projects[project].Quota.Check(project, l.usage[project], r.Usage); err != nil {
		return err
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = time.Now().UTC()
	}
	l.put(project, r)
	l.usage[project] = l.usage[project].Add(r.Usage)
	return nil
}

// put stores r under a new version (l.mu held).
func (l *Local) put(project string, r Reservation) {
	if l.res[project] == nil {
		l.res[project] = map[string]Reservation{}
	}
	l.version++
	r.Version = l.version
	l.res[project][r.ID] = r
}

func (l *Local) Release(_ context.Context, project, id string, member Usage) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.res[project][id]
	if !ok {
		return nil
	}
	next := r
	next.Usage = r.Usage.Sub(member)
	l.set(project, r, next)
	return nil
}

// set replaces old with next and moves the usage (l.mu held).
func (l *Local) set(project string, old, next Reservation) {
	if next.Usage.Sandboxes <= 0 {
		delete(l.res[project], old.ID)
		next.Usage = Usage{}
	} else {
		l.put(project, next)
	}
	l.usage[project] = l.usage[project].Sub(old.Usage).Add(next.Usage)
}

func (l *Local) Reservations(_ context.Context, project string) ([]Reservation, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Reservation, 0, len(l.res[project]))
	for _, r := range l.res[project] {
		out = append(out, r)
	}
	return out, nil
}

func (l *Local) Adjust(_ context.Context, project string, old, next Reservation) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur, ok := l.res[project][old.ID]
	if (!ok && old.Version != 0) || (ok && cur.Version != old.Version) {
		return errdefs.Conflict("reservation %s changed meanwhile", old.ID)
	}
	if !ok {
		old.Usage = Usage{}
	}
	if next.CreatedAt.IsZero() {
		next.CreatedAt = time.Now().UTC()
	}
	l.set(project, Reservation{ID: old.ID, Usage: old.Usage}, next)
	return nil
}

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsec-dev/dsec/internal/errdefs"
	"github.com/dsec-dev/dsec/internal/project"
	"github.com/dsec-dev/dsec/pkg/api"
)

// maxCAS bounds the compare-and-swap rounds of one usage change.
const maxCAS = 64

// Projects is the etcd project.Store (see the package doc for the keys): every
// API server holding one enforces the same quotas, with etcd transactions as
// the only coordination.
type Projects struct {
	cli  *clientv3.Client
	k    keys
	toks *Tokens
	proj *mirror[projectRecord]

	mu     sync.Mutex
	usage  map[string]usageSeen // last usage seen per project: a create's first try skips the read
	queues map[string]*quotaQueue
}

// queues holds one commit queue per project.
type quotaQueue struct {
	mu      sync.Mutex
	pending []*quotaOp
	running bool
}

// quotaOp is one queued reserve or release.
type quotaOp struct {
	reserve *project.Reservation
	release string
	member  project.Usage
	done    chan error
}

// maxBatchOps bounds one commit's reservations (etcd's default --max-txn-ops is 128).
const maxBatchOps = 100

type usageSeen struct {
	u   project.Usage
	rev int64
}

// projectRecord is the value under projects/NAME.
type projectRecord struct {
	Quota     project.Quota `json:"quota"`
	CreatedAt time.Time     `json:"created_at"`
	// Registries are the project's registry credentials by host (in the
	// record, so every API server's mirror has them and Delete removes
	// them with the project).
	Registries map[string]api.RegistryAuth `json:"registries,omitempty"`
}

var _ project.Store = (*Projects)(nil)

func decodeProject(b []byte) (projectRecord, error) {
	var r projectRecord
	return r, json.Unmarshal(b, &r)
}

// OpenProjects follows the projects and tokens (toks, from OpenTokens) until
// ctx ends.
func OpenProjects(ctx context.Context, cli *clientv3.Client, prefix string, toks *Tokens, log *slog.Logger) (*Projects, error) {
	if log == nil {
		log = slog.Default()
	}
	k := newKeys(prefix)
	m, err := openMirror(ctx, cli, k.projects(), decodeProject, log)
	if err != nil {
		return nil, err
	}
	return &Projects{cli: cli, k: k, toks: toks, proj: m, usage: map[string]usageSeen{}, queues: map[string]*quotaQueue{}}, nil
}

func unavailable(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return errdefs.Wrap(api.CodeUnavailable, err, format, args...)
}

func (s *Projects) Identify(tok string) (string, bool) { return s.toks.Project(tok) }

func (s *Projects) Limits(name string) (project.Quota, bool) {
	r, _, ok := s.proj.get(name)
	return r.Quota, ok || name == project.Default
}

func (s *Projects) tokenRecord(name string) string {
	rec, _ := json.Marshal(tokenRecord{CreatedAt: time.Now().UTC(), CreatedBy: "dsec project", Project: name})
	return string(rec)
}

// exists is the compare that name exists (the default project always does).
func (s *Projects) exists(name string) []clientv3.Cmp {
	if name == project.Default {
		return nil
	}
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.k.project(name)), ">", 0)}
}

func (s *Projects) Create(ctx context.Context, name string, q project.Quota) (string, error) {
	if err := project.CheckName(name); err != nil {
		return "", err
	}
	if err := project.CheckQuota(q); err != nil {
		return "", err
	}
	if name == project.Default {
		return "", errdefs.New(api.CodeAlreadyExists, "project %q exists", name)
	}
	tok, err := project.NewToken()
	if err != nil {
		return "", err
	}
	rec, _ := json.Marshal(projectRecord{Quota: q, CreatedAt: time.Now().UTC()})
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.k.project(name)), "=", 0)).
		Then(clientv3.OpPut(s.k.project(name), string(rec)), clientv3.OpPut(s.k.token(digest(tok)), s.tokenRecord(name))).
		Commit()
	if err != nil {
		return "", unavailable(err, "project: create %q", name)
	}
	if !resp.Succeeded {
		return "", errdefs.New(api.CodeAlreadyExists, "project %q exists", name)
	}
	return tok, nil
}

// read returns name's record (ok false: none) and reserved usage.
func (s *Projects) read(ctx context.Context, name string) (project.Info, bool, error) {
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.k.project(name)), clientv3.OpGet(s.k.usage(name))).Commit()
	if err != nil {
		return project.Info{}, false, unavailable(err, "project: read %q", name)
	}
	in := project.Info{Name: name}
	pk := resp.Responses[0].GetResponseRange().Kvs
	if len(pk) > 0 {
		r, err := decodeProject(pk[0].Value)
		if err != nil {
			return in, false, errdefs.Internal(err, "project %q: bad record", name)
		}
		in.Quota, in.CreatedAt, in.Registries = r.Quota, r.CreatedAt, project.RegistryHosts(r.Registries)
	}
	if uk := resp.Responses[1].GetResponseRange().Kvs; len(uk) > 0 {
		_ = json.Unmarshal(uk[0].Value, &in.Usage)
	}
	s.toks.m.each(func(d string, t tokenRecord) {
		if t.Project == name {
			in.Tokens = append(in.Tokens, project.TokenInfo{ID: project.TokenID(d), CreatedAt: t.CreatedAt})
		}
	})
	sort.Slice(in.Tokens, func(i, j int) bool { return in.Tokens[i].ID < in.Tokens[j].ID })
	return in, len(pk) > 0 || name == project.Default, nil
}

func (s *Projects) Get(ctx context.Context, name string) (project.Info, error) {
	in, ok, err := s.read(ctx, name)
	if err != nil {
		return in, err
	}
	if !ok {
		return in, errdefs.NotFound("project %q not found", name)
	}
	return in, nil
}

func (s *Projects) List(ctx context.Context) ([]project.Info, error) {
	resp, err := s.cli.Get(ctx, s.k.projects(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, unavailable(err, "project: list")
	}
	names := []string{project.Default}
	for _, kv := range resp.Kvs {
		if n := strings.TrimPrefix(string(kv.Key), s.k.projects()); n != project.Default {
			names = append(names, n)
		}
	}
	sort.Strings(names[1:])
	out := make([]project.Info, 0, len(names))
	for _, n := range names {
		in, ok, err := s.read(ctx, n)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, in)
		}
	}
	return out, nil
}

func (s *Projects) Delete(ctx context.Context, name string) error {
	if name == project.Default {
		return errdefs.Invalid("the default project cannot be removed")
	}
	resp, err := s.cli.Get(ctx, s.k.usage(name))
	if err != nil {
		return unavailable(err, "project: delete %q", name)
	}
	var u project.Usage
	urev := int64(0)
	if len(resp.Kvs) > 0 {
		_ = json.Unmarshal(resp.Kvs[0].Value, &u)
		urev = resp.Kvs[0].ModRevision
	}
	if u.Sandboxes > 0 {
		return errdefs.Conflict("project %q still holds %d sandboxes; delete them first", name, u.Sandboxes)
	}
	ops := []clientv3.Op{clientv3.OpDelete(s.k.project(name)), clientv3.OpDelete(s.k.quota(name), clientv3.WithPrefix())}
	s.toks.m.each(func(d string, t tokenRecord) {
		if t.Project == name {
			ops = append(ops, clientv3.OpDelete(s.k.token(d)))
		}
	})
	tr, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.k.project(name)), ">", 0), clientv3.Compare(clientv3.ModRevision(s.k.usage(name)), "=", urev)).
		Then(ops...).Commit()
	if err != nil {
		return unavailable(err, "project: delete %q", name)
	}
	if !tr.Succeeded {
		if _, _, ok := s.proj.get(name); !ok {
			return errdefs.NotFound("project %q not found", name)
		}
		return errdefs.Conflict("project %q changed meanwhile; try again", name)
	}
	return nil
}

func (s *Projects) SetQuota(ctx context.Context, name string, q project.Quota) error {
	if err := project.CheckQuota(q); err != nil {
		return err
	}
	return s.changeRecord(ctx, name, "set quota of", func(rec *projectRecord) error {
		rec.Quota = q
		return nil
	})
}

// RegistryAuth implements project.Store from this API server's mirror of the
// project records.
func (s *Projects) RegistryAuth(name string) map[string]api.RegistryAuth {
	r, _, _ := s.proj.get(name)
	return r.Registries
}

func (s *Projects) SetRegistryAuth(ctx context.Context, name, host string, a api.RegistryAuth) error {
	host, err := project.CheckRegistryHost(host)
	if err != nil {
		return err
	}
	if err := project.CheckRegistryAuth(a); err != nil {
		return err
	}
	return s.changeRecord(ctx, name, "set registry credentials of", func(rec *projectRecord) error {
		if rec.Registries == nil {
			rec.Registries = map[string]api.RegistryAuth{}
		}
		rec.Registries[host] = a
		return nil
	})
}

func (s *Projects) RemoveRegistryAuth(ctx context.Context, name, host string) error {
	h := project.RegistryHost(host)
	return s.changeRecord(ctx, name, "remove registry credentials of", func(rec *projectRecord) error {
		if _, ok := rec.Registries[h]; !ok {
			return errdefs.NotFound("project %q has no credentials for registry %q", name, host)
		}
		delete(rec.Registries, h)
		if len(rec.Registries) == 0 {
			rec.Registries = nil
		}
		return nil
	})
}

// changeRecord applies f to project name's record (the default project's is
// made on its first change) with a compare-and-swap on its mod revision.
func (s *Projects) changeRecord(ctx context.Context, name, what string, f func(*projectRecord) error) error {
	for range maxCAS {
		resp, err := s.cli.Get(ctx, s.k.project(name))
		if err != nil {
			return unavailable(err, "project: %s %q", what, name)
		}
		rec, rev := projectRecord{CreatedAt: time.Now().UTC()}, int64(0)
		if len(resp.Kvs) > 0 {
			rec, _ = decodeProject(resp.Kvs[0].Value)
			rev = resp.Kvs[0].ModRevision
		} else if name != project.Default {
			return errdefs.NotFound("project %q not found", name)
		}
		if err := f(&rec); err != nil {
			return err
		}
		b, _ := json.Marshal(rec)
		tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.k.project(name)), "=", rev)).
			Then(clientv3.OpPut(s.k.project(name), string(b))).Commit()
		if err != nil {
			return unavailable(err, "project: %s %q", what, name)
		}
		if tr.Succeeded {
			return nil
		}
	}
	return errdefs.New(api.CodeUnavailable, "project %q: too many concurrent changes", name)
}

func (s *Projects) AddToken(ctx context.Context, name string) (string, error) {
	tok, err := project.NewToken()
	if err != nil {
		return "", err
	}
	tr, err := s.cli.Txn(ctx).If(s.exists(name)...).Then(clientv3.OpPut(s.k.token(digest(tok)), s.tokenRecord(name))).Commit()
	if err != nil {
		return "", unavailable(err, "project: add a token to %q", name)
	}
	if !tr.Succeeded {
		return "", errdefs.NotFound("project %q not found", name)
	}
	return tok, nil
}

func (s *Projects) RemoveToken(ctx context.Context, name, id string) error {
	found, n := "", 0
	s.toks.m.each(func(d string, t tokenRecord) {
		if t.Project == name {
			n++
			if id != "" && strings.HasPrefix(d, id) {
				found = d
			}
		}
	})
	if found == "" {
		return errdefs.NotFound("project %q has no token %q", name, id)
	}
	if name == project.Default && n == 1 {
		return errdefs.Conflict("that is the default project's last token")
	}
	_, err := s.cli.Delete(ctx, s.k.token(found))
	return unavailable(err, "project: remove a token of %q", name)
}

// quotaState is one round's view of a project's record, usage and reservation.
type quotaState struct {
	quota      project.Quota
	projRev    int64
	usage      project.Usage
	usageRev   int64
	res        *project.Reservation
	fresh      bool // read from etcd in this call (not guessed from memory)
	projExists bool
}

// update runs f on the current state of project name and reservation rid and
// writes what it returns (the reservation, nil to delete it, and the usage)
// if nothing changed meanwhile, else runs it again on the new state. guess,
// when set, is used for the first round instead of a read; f must not refuse
// on a state that is not fresh.
func (s *Projects) update(ctx context.Context, name, rid string, guess *quotaState,
	f func(st quotaState) (*project.Reservation, project.Usage, error)) error {
	pk, uk, rk := s.k.project(name), s.k.usage(name), s.k.reservation(name, rid)
	gets := []clientv3.Op{clientv3.OpGet(pk), clientv3.OpGet(uk), clientv3.OpGet(rk)}
	var st quotaState
	if guess != nil {
		st = *guess
	} else {
		resp, err := s.cli.Txn(ctx).Then(gets...).Commit()
		if err != nil {
			return unavailable(err, "project %q: read usage", name)
		}
		st = s.decode(name, resp.Responses)
	}
	for range maxCAS {
		if !st.projExists {
			return errdefs.NotFound("project %q not found", name)
		}
		next, use, err := f(st)
		if err != nil {
			if st.fresh {
				return err
			}
			resp, rerr := s.cli.Txn(ctx).Then(gets...).Commit()
			if rerr != nil {
				return unavailable(rerr, "project %q: read usage", name)
			}
			st = s.decode(name, resp.Responses)
			continue
		}
		ub, _ := json.Marshal(use)
		ops := []clientv3.Op{clientv3.OpPut(uk, string(ub))}
		if next == nil {
			ops = append(ops, clientv3.OpDelete(rk))
		} else {
			rb, _ := json.Marshal(next)
			ops = append(ops, clientv3.OpPut(rk, string(rb)))
		}
		resRev := int64(0)
		if st.res != nil {
			resRev = st.res.Version
		}
		tr, err := s.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(pk), "=", st.projRev),
			clientv3.Compare(clientv3.ModRevision(uk), "=", st.usageRev),
			clientv3.Compare(clientv3.ModRevision(rk), "=", resRev),
		).Then(ops...).Else(gets...).Commit()
		if err != nil {
			return unavailable(err, "project %q: reserve", name)
		}
		if tr.Succeeded {
			s.mu.Lock()
			s.usage[name] = usageSeen{use, tr.Header.Revision}
			s.mu.Unlock()
			return nil
		}
		st = s.decode(name, tr.Responses)
	}
	return errdefs.New(api.CodeUnavailable, "project %q: %d conflicting quota updates in a row; try again", name, maxCAS)
}

// decode reads a round's state from the three gets' responses.
func (s *Projects) decode(name string, rs []*etcdserverpb.ResponseOp) quotaState {
	st := quotaState{fresh: true, projExists: name == project.Default}
	if kvs := rs[0].GetResponseRange().Kvs; len(kvs) > 0 {
		r, _ := decodeProject(kvs[0].Value)
		st.quota, st.projRev, st.projExists = r.Quota, kvs[0].ModRevision, true
	}
	if kvs := rs[1].GetResponseRange().Kvs; len(kvs) > 0 {
		_ = json.Unmarshal(kvs[0].Value, &st.usage)
		st.usageRev = kvs[0].ModRevision
	}
	if len(rs) > 2 {
		if kvs := rs[2].GetResponseRange().Kvs; len(kvs) > 0 {
			st.res = decodeReservation(kvs[0])
		}
	}
	s.mu.Lock()
	s.usage[name] = usageSeen{st.usage, st.usageRev}
	s.mu.Unlock()
	return st
}

func decodeReservation(kv *mvccpb.KeyValue) *project.Reservation {
	var r project.Reservation
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return nil
	}
	r.Version = kv.ModRevision
	return &r
}

// guess is the state this API server saw last (nil: none).
func (s *Projects) guess(name string) *quotaState {
	rec, prev, ok := s.proj.get(name)
	s.mu.Lock()
	u, seen := s.usage[name]
	s.mu.Unlock()
	if !seen || (!ok && name != project.Default) {
		return nil
	}
	return &quotaState{quota: rec.Quota, projRev: prev, projExists: true, usage: u.u, usageRev: u.rev}
}

// Reserve implements project.Store. Concurrent reserves and releases of one
// project in this process are committed together (see commit), so creates in
// flight do not fight over the usage key; across API servers the
// compare-and-swap decides.
func (s *Projects) Reserve(ctx context.Context, name string, r project.Reservation) error {
	if r.CreatedAt.IsZero() {
		r.CreatedAt = time.Now().UTC()
	}
	return s.enqueue(name, &quotaOp{reserve: &r})
}

func (s *Projects) Release(ctx context.Context, name, id string, member project.Usage) error {
	err := s.enqueue(name, &quotaOp{release: id, member: member})
	if errdefs.Is(err, api.CodeNotFound) {
		return nil // the project is gone, and its reservations with it
	}
	return err
}

func (s *Projects) Reservations(ctx context.Context, name string) ([]project.Reservation, error) {
	resp, err := s.cli.Get(ctx, s.k.reservations(name), clientv3.WithPrefix())
	if err != nil {
		return nil, unavailable(err, "project %q: list reservations", name)
	}
	out := make([]project.Reservation, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if r := decodeReservation(kv); r != nil {
			out = append(out, *r)
		}
	}
	return out, nil
}

func (s *Projects) Adjust(ctx context.Context, name string, old, next project.Reservation) error {
	if next.CreatedAt.IsZero() {
		next.CreatedAt = time.Now().UTC()
	}
	return s.update(ctx, name, old.ID, nil, func(st quotaState) (*project.Reservation, project.Usage, error) {
		cur := int64(0)
		var had project.Usage
		if st.res != nil {
			cur, had = st.res.Version, st.res.Usage
		}
		if cur != old.Version {
			return nil, st.usage, errdefs.Conflict("reservation %s changed meanwhile", old.ID)
		}
		use := st.usage.Sub(had)
		if next.Usage.Sandboxes <= 0 {
			return nil, use, nil
		}
		n := next
		return &n, use.Add(next.Usage), nil
	})
}

// String names the store in logs.
func (s *Projects) String() string { return fmt.Sprintf("etcd projects under %s", s.k.prefix) }

// enqueue adds op to project name's queue, starts a committer if none runs,
// and waits for op's outcome (commits have their own timeout, so an op that
// is committed is always answered: a reservation never outlives a caller
// that was told it failed).
func (s *Projects) enqueue(name string, op *quotaOp) error {
	op.done = make(chan error, 1)
	s.mu.Lock()
	q := s.queues[name]
	if q == nil {
		q = &quotaQueue{}
		s.queues[name] = q
	}
	s.mu.Unlock()
	q.mu.Lock()
	q.pending = append(q.pending, op)
	if !q.running {
		q.running = true
		go s.drain(name, q)
	}
	q.mu.Unlock()
	return <-op.done
}

// drain commits q's ops, up to maxBatchOps at a time, until none is left.
func (s *Projects) drain(name string, q *quotaQueue) {
	for {
		q.mu.Lock()
		n := min(len(q.pending), maxBatchOps)
		if n == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		batch := q.pending[:n:n]
		q.pending = q.pending[n:]
		q.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs := s.commit(ctx, name, batch)
		cancel()
		for i, op := range batch {
			op.done <- errs[i]
		}
	}
}

// commit applies batch in order in one transaction: each reserve that fits the
// quota after the ones before it is added, each release lowers its
// reservation; the transaction compares the project record, the usage and
// every reservation it changes, and on a conflict the batch is evaluated
// again on the state the transaction's else branch returned. A refusal is
// only ever decided on state read from etcd in this call.
func (s *Projects) commit(ctx context.Context, name string, batch []*quotaOp) []error {
	errs := make([]error, len(batch))
	fill := func(err error) []error {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	pk, uk := s.k.project(name), s.k.usage(name)
	gets := []clientv3.Op{clientv3.OpGet(pk), clientv3.OpGet(uk)}
	var ids []string // reservations released, in gets order after pk and uk
	seen := map[string]bool{}
	for _, op := range batch {
		if op.reserve == nil && !seen[op.release] {
			seen[op.release] = true
			ids = append(ids, op.release)
			gets = append(gets, clientv3.OpGet(s.k.reservation(name, op.release)))
		}
	}
	var st quotaState
	var res map[string]*project.Reservation
	read := func(rs []*etcdserverpb.ResponseOp) {
		st = s.decode(name, rs[:2])
		res = make(map[string]*project.Reservation, len(ids))
		for i, id := range ids {
			if kvs := rs[2+i].GetResponseRange().Kvs; len(kvs) > 0 {
				res[id] = decodeReservation(kvs[0])
			}
		}
	}
	if g := s.guess(name); g != nil && len(ids) == 0 {
		st, res = *g, map[string]*project.Reservation{}
	} else {
		resp, err := s.cli.Txn(ctx).Then(gets...).Commit()
		if err != nil {
			return fill(unavailable(err, "project %q: read usage", name))
		}
		read(resp.Responses)
	}
	for range maxCAS {
		if !st.projExists {
			return fill(errdefs.NotFound("project %q not found", name))
		}
		use := st.usage
		cur := make(map[string]*project.Reservation, len(res))
		for id, r := range res {
			c := *r
			cur[id] = &c
		}
		var puts []clientv3.Op
		stale := false
		for i, op := range batch {
			errs[i] = nil
			if r := op.reserve; r != nil {
				if err := st.quota.Check(name, use, r.Usage); err != nil {
					if !st.fresh {
						stale = true
						break
					}
					errs[i] = err
					continue
				}
				use = use.Add(r.Usage)
				b, _ := json.Marshal(r)
				puts = append(puts, clientv3.OpPut(s.k.reservation(name, r.ID), string(b)))
				continue
			}
			r := cur[op.release]
			if r == nil {
				continue // released already
			}
			next := r.Usage.Sub(op.member)
			use = use.Sub(r.Usage.Sub(next))
			r.Usage = next
		}
		if stale {
			resp, err := s.cli.Txn(ctx).Then(gets...).Commit()
			if err != nil {
				return fill(unavailable(err, "project %q: read usage", name))
			}
			read(resp.Responses)
			continue
		}
		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(pk), "=", st.projRev),
			clientv3.Compare(clientv3.ModRevision(uk), "=", st.usageRev),
		}
		for _, id := range ids {
			rk := s.k.reservation(name, id)
			old, now := res[id], cur[id]
			rev := int64(0)
			if old != nil {
				rev = old.Version
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(rk), "=", rev))
			switch {
			case old == nil:
			case now.Usage.Sandboxes <= 0:
				puts = append(puts, clientv3.OpDelete(rk))
			case now.Usage != old.Usage:
				b, _ := json.Marshal(now)
				puts = append(puts, clientv3.OpPut(rk, string(b)))
			}
		}
		if len(puts) == 0 {
			return errs // every op refused or a no-op: nothing to write
		}
		ub, _ := json.Marshal(use)
		puts = append(puts, clientv3.OpPut(uk, string(ub)))
		tr, err := s.cli.Txn(ctx).If(cmps...).Then(puts...).Else(gets...).Commit()
		if err != nil {
			return fill(unavailable(err, "project %q: reserve", name))
		}
		if tr.Succeeded {
			s.mu.Lock()
			s.usage[name] = usageSeen{use, tr.Header.Revision}
			s.mu.Unlock()
			return errs
		}
		read(tr.Responses)
	}
	return fill(errdefs.New(api.CodeUnavailable, "project %q: %d conflicting quota updates in a row; try again", name, maxCAS))
}

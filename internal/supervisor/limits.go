package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// This file holds the keys' rate limits and in-flight caps. They live
// here, next to the quotas, so that every front end (the HTTP API, /mcp,
// stdio MCP) shares one limiter per key.

// ErrRateLimited: the key acts faster than its rate limits allow, or has
// as much work in flight as it may. The error is a *RateError, which says
// when to retry.
var ErrRateLimited = errors.New("rate limited")

// RateError is a refusal by a key's rate limits or in-flight cap.
type RateError struct {
	Msg string
	// RetryAfter is how long to wait before trying again.
	RetryAfter time.Duration
}

func (e *RateError) Error() string { return e.Msg }

// Is makes errors.Is(err, ErrRateLimited) true.
func (e *RateError) Is(target error) bool { return target == ErrRateLimited }

// Op is a kind of call a key's limits count.
type Op int

// The ops, each with its own rate limiter; all share the key's in-flight
// cap (store.RateLimits.MaxInFlight).
const (
	// OpCreate is a sandbox create.
	OpCreate Op = iota
	// OpExec is an exec, a process start, a write to a process's standard
	// input, or a wait for a process.
	OpExec
	// OpFiles is a call of the file API (an archive is one call).
	OpFiles
	// OpRequest only holds an in-flight slot while a request body is read
	// (/mcp); the calls it makes take their own rate tokens.
	OpRequest
)

func (o Op) String() string {
	switch o {
	case OpCreate:
		return "creates"
	case OpExec:
		return "execs"
	case OpFiles:
		return "file calls"
	}
	return "requests"
}

// MaxInFlightTotal bounds the calls of every key together that move data
// or wait, so that many keys cannot add up to more than the host holds.
const MaxInFlightTotal = 512

// inFlightRetry is the Retry-After of a refusal by an in-flight cap.
const inFlightRetry = time.Second

// limiters holds every key's limiters.
type limiters struct {
	mu    sync.Mutex
	keys  map[string]*keyLimits
	total int
}

type keyLimits struct {
	rate     store.RateLimits // with defaults
	ops      [3]*rate.Limiter // by Op (OpRequest has none)
	inFlight int
}

func (ls *limiters) key(c Caller) *keyLimits {
	kl := ls.keys[c.KeyID]
	if kl == nil {
		r := c.Rate.WithDefaults()
		kl = &keyLimits{rate: r}
		kl.ops[OpCreate] = rate.NewLimiter(rate.Limit(r.CreatesPerSecond), r.CreateBurst)
		kl.ops[OpExec] = rate.NewLimiter(rate.Limit(r.ExecsPerSecond), r.ExecBurst)
		kl.ops[OpFiles] = rate.NewLimiter(rate.Limit(r.FilesPerSecond), r.FileBurst)
		if ls.keys == nil {
			ls.keys = map[string]*keyLimits{}
		}
		ls.keys[c.KeyID] = kl
	}
	return kl
}

// take takes a token of op's limiter. ls.mu is held.
func (kl *keyLimits) take(op Op) error {
	if op == OpRequest {
		return nil
	}
	lim := kl.ops[op]
	res := lim.Reserve()
	if !res.OK() {
		return &RateError{Msg: "this key may not make " + op.String(), RetryAfter: time.Minute}
	}
	if d := res.Delay(); d > 0 {
		res.Cancel()
		return &RateError{
			Msg:        fmt.Sprintf("too many %s: this key may make %g per second; retry after %s", op, float64(lim.Limit()), d.Round(time.Millisecond)),
			RetryAfter: d,
		}
	}
	return nil
}

// admission marks a context whose call has been admitted already (by
// Begin), so that the supervisor calls it makes are not counted again.
type admission struct {
	key string
	// rated says a rate token was taken too (OpRequest takes none).
	rated bool
}

type admissionKey struct{}

// Begin admits one call of op by c: it takes a token of the key's rate
// limiter for op and a slot of its in-flight cap, or fails with a
// *RateError. The context it returns carries the admission, so that the
// supervisor calls made with it count no further; call done when the call
// has finished. Front ends call Begin before they read a request's body,
// so that the key's in-flight cap bounds the daemon's memory too; the
// supervisor's own methods call it when they were not given an admitted
// context.
func (s *Supervisor) Begin(ctx context.Context, c Caller, op Op) (context.Context, func(), error) {
	if a, ok := ctx.Value(admissionKey{}).(admission); ok && a.key == c.KeyID {
		if a.rated || op == OpRequest {
			return ctx, func() {}, nil
		}
		s.lim.mu.Lock()
		err := s.lim.key(c).take(op)
		s.lim.mu.Unlock()
		return ctx, func() {}, err
	}
	s.lim.mu.Lock()
	kl := s.lim.key(c)
	switch {
	case kl.inFlight >= kl.rate.MaxInFlight:
		s.lim.mu.Unlock()
		return ctx, nil, &RateError{
			Msg:        fmt.Sprintf("this key has %d calls running (execs, file transfers, stdin writes, waits, creates) and may have at most %d at once; wait for some to finish", kl.inFlight, kl.rate.MaxInFlight),
			RetryAfter: inFlightRetry,
		}
	case s.lim.total >= MaxInFlightTotal:
		s.lim.mu.Unlock()
		return ctx, nil, &RateError{
			Msg:        fmt.Sprintf("the daemon has %d calls running, the most it takes at once; retry shortly", s.lim.total),
			RetryAfter: inFlightRetry,
		}
	}
	if err := kl.take(op); err != nil {
		s.lim.mu.Unlock()
		return ctx, nil, err
	}
	kl.inFlight++
	s.lim.total++
	s.lim.mu.Unlock()
	var once sync.Once
	done := func() {
		once.Do(func() {
			s.lim.mu.Lock()
			kl.inFlight--
			s.lim.total--
			s.lim.mu.Unlock()
		})
	}
	return context.WithValue(ctx, admissionKey{}, admission{key: c.KeyID, rated: op != OpRequest}), done, nil
}

// ForgetKey drops the limiters of a deleted key (calls still running
// release their slots all the same).
func (s *Supervisor) ForgetKey(id string) {
	s.lim.mu.Lock()
	defer s.lim.mu.Unlock()
	delete(s.lim.keys, id)
}

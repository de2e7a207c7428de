package asyncio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisMode selects the Redis command a Redis lookup runs per key.
type RedisMode int

const (
	// GetJSON runs GET and decodes the string value as a JSON object
	// (numbers become float64).
	GetJSON RedisMode = iota
	// HashGetAll runs HGETALL and returns the hash's fields as strings.
	HashGetAll
)

// Default circuit-breaker settings of NewRedis.
const (
	DefaultBreakerFailures = 5
	DefaultBreakerCoolDown = time.Second
)

// Redis is a Lookup and Batcher backed by go-redis. Keys are used as given. A
// missing key is an empty map, not an error. A value that is not a JSON object
// (GetJSON) or a key of the wrong type is a permanent error.
//
// The client must be created by the caller with ContextTimeoutEnabled: true,
// otherwise go-redis ignores the per-call deadlines and a stalled server
// stalls the operator. MaxRetries: -1 is recommended, since the Operator
// retries itself within its Timeout.
//
// A circuit breaker guards the server: after a number of consecutive
// failures (network errors and timeouts; replies such as WRONGTYPE do not
// count) it opens for a cool-down and fails fast with ErrCircuitOpen, so a
// dead Redis costs a fast fallback, not a stall; then it lets one probe
// through, whose success closes it again. Safe for concurrent use.
type Redis struct {
	client *redis.Client
	mode   RedisMode
	br     breaker
}

// RedisOption configures NewRedis.
type RedisOption func(*Redis)

// Breaker sets the circuit breaker of a Redis lookup: it opens after failures
// consecutive failures and stays open for coolDown. It panics if failures < 1
// or coolDown <= 0 (a setup mistake).
func Breaker(failures int, coolDown time.Duration) RedisOption {
	if failures < 1 || coolDown <= 0 {
		panic(fmt.Sprintf("asyncio.Breaker(%d, %v): need failures >= 1 and coolDown > 0", failures, coolDown))
	}
	return func(r *Redis) { r.br.threshold, r.br.coolDown = failures, coolDown }
}

// NewRedis returns a Redis lookup running mode's command on client, with a
// circuit breaker of DefaultBreakerFailures and DefaultBreakerCoolDown unless
// a Breaker option says otherwise.
func NewRedis(client *redis.Client, mode RedisMode, opts ...RedisOption) *Redis {
	r := &Redis{client: client, mode: mode}
	r.br.threshold, r.br.coolDown, r.br.now = DefaultBreakerFailures, DefaultBreakerCoolDown, time.Now
	for _, opt := range opts {
		opt(r)
	}
	return r
}

// Get fetches key with one command. It returns ErrCircuitOpen without a
// round trip while the breaker is open.
func (r *Redis) Get(ctx context.Context, key string) (map[string]any, error) {
	if !r.br.allow() {
		return nil, ErrCircuitOpen
	}
	cmd := r.command(ctx, r.client, key)
	err := cmd.Err()
	r.br.done(transportFailure(err))
	return r.decode(key, cmd)
}

// GetMany fetches keys in one pipeline (one round trip). The breaker counts
// the pipeline as one call.
func (r *Redis) GetMany(ctx context.Context, keys []string) ([]map[string]any, []error) {
	vals, errs := make([]map[string]any, len(keys)), make([]error, len(keys))
	if !r.br.allow() {
		for i := range errs {
			errs[i] = ErrCircuitOpen
		}
		return vals, errs
	}
	pipe := r.client.Pipeline()
	cmds := make([]redis.Cmder, len(keys))
	for i, k := range keys {
		cmds[i] = r.command(ctx, pipe, k)
	}
	// Exec's error is the first failed command's; each command is looked at
	// below, since a missing key (redis.Nil) is not a failure.
	_, _ = pipe.Exec(ctx)
	failed := false
	for i, cmd := range cmds {
		failed = failed || transportFailure(cmd.Err())
		vals[i], errs[i] = r.decode(keys[i], cmd)
	}
	r.br.done(failed)
	return vals, errs
}

func (r *Redis) command(ctx context.Context, c redis.Cmdable, key string) redis.Cmder {
	if r.mode == HashGetAll {
		return c.HGetAll(ctx, key)
	}
	return c.Get(ctx, key)
}

func (r *Redis) decode(key string, cmd redis.Cmder) (map[string]any, error) {
	switch cmd := cmd.(type) {
	case *redis.MapStringStringCmd:
		h, err := cmd.Result()
		if err != nil {
			return nil, redisError("HGETALL", key, err)
		}
		m := make(map[string]any, len(h))
		for k, v := range h {
			m[k] = v
		}
		return m, nil
	case *redis.StringCmd:
		s, err := cmd.Result()
		if errors.Is(err, redis.Nil) {
			return map[string]any{}, nil
		}
		if err != nil {
			return nil, redisError("GET", key, err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil || m == nil {
			return nil, Permanent(fmt.Errorf("redis GET %q: value is not a JSON object", key))
		}
		return m, nil
	}
	return nil, fmt.Errorf("redis %q: unexpected command %T", key, cmd)
}

func redisError(cmd, key string, err error) error {
	err = fmt.Errorf("redis %s %q: %w", cmd, key, err)
	var reply redis.Error
	if errors.As(err, &reply) {
		return Permanent(err) // a server reply such as WRONGTYPE: retrying returns it again
	}
	return err
}

// transportFailure reports whether err says the server is unreachable or
// slow, as opposed to a successful round trip (a reply, a missing key) or the
// caller giving up (cancellation).
func transportFailure(err error) bool {
	var reply redis.Error
	switch {
	case err == nil, errors.Is(err, redis.Nil), errors.Is(err, context.Canceled), errors.As(err, &reply):
		return false
	}
	return true
}

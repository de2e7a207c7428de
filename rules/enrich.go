package rules

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"

	"github.com/vigil-cep/vigil/asyncio"
)

// EnrichmentSpec declares an async lookup per event of a stream (docs/design.md
// "Async enrichment"); the result is merged into the event under the
// enrichment's name before joins, windows, patterns and rules see it.
type EnrichmentSpec struct {
	Stream   string     `yaml:"stream" json:"stream"`
	Redis    *RedisSpec `yaml:"redis" json:"redis,omitempty"`
	HTTP     *HTTPSpec  `yaml:"http" json:"http,omitempty"`
	Timeout  Duration   `yaml:"timeout" json:"timeout"`
	Capacity int        `yaml:"capacity" json:"capacity,omitempty"`
	Retries  int        `yaml:"retries" json:"retries,omitempty"`
	Ordered  bool       `yaml:"ordered" json:"ordered,omitempty"`
	Cache    *CacheSpec `yaml:"cache" json:"cache,omitempty"`
	Fallback Value      `yaml:"fallback" json:"fallback,omitempty"`
}

// RedisSpec is a Redis lookup: GET of a JSON object, or HGETALL of a hash,
// at the key the expression builds.
type RedisSpec struct {
	Get  Expr `yaml:"get" json:"get,omitempty"`
	Hash Expr `yaml:"hash" json:"hash,omitempty"`
}

// HTTPSpec is an HTTP lookup: {key} in URL is replaced by the key the Key
// expression builds (escaped); the response is a JSON object.
type HTTPSpec struct {
	URL     string `yaml:"url" json:"url"`
	Method  string `yaml:"method" json:"method,omitempty"`
	Key     Expr   `yaml:"key" json:"key"`
	MaxBody int64  `yaml:"max_body" json:"max_body,omitempty"`
}

// CacheSpec is an LRU cache of successful lookups.
type CacheSpec struct {
	Size int      `yaml:"size" json:"size"`
	TTL  Duration `yaml:"ttl" json:"ttl,omitempty"`
}

// Value is an arbitrary YAML/JSON value (a fallback object).
type Value struct{ V any }

func (v *Value) decodeNode(d *decoder, n *yaml.Node, path string) {
	if err := n.Decode(&v.V); err != nil {
		d.fail(n, path, err)
	}
}

// DefaultMaxBody caps an HTTP lookup's response.
const DefaultMaxBody = 1 << 20

// Enrichment is a compiled enrichment.
type Enrichment struct {
	Name   string
	Stream int
	// Redis lookups use RedisMode; HTTP ones Method, URL and MaxBody.
	Redis     bool
	RedisMode asyncio.RedisMode
	Method    string
	URL       string
	MaxBody   int64
	Config    asyncio.Config
	key       exprSource
}

func (c *compiler) compileEnrichments(fail func(string, error)) {
	rs := c.rs
	for _, name := range sortedNames(c.doc.Enrichments) {
		spec, path := c.doc.Enrichments[name], "enrichments."+name
		if spec == nil {
			spec = &EnrichmentSpec{}
		}
		e := &Enrichment{Name: name}
		idx, ok := rs.streamIndex[spec.Stream]
		if !ok || rs.Streams[idx].Pattern != noPattern || rs.Streams[idx].Join != noJoin {
			fail(path+".stream", errors.New("an enrichment needs an input stream"))
			continue
		}
		e.Stream = idx
		var keySrc Expr
		var keyPath string
		switch {
		case spec.Redis != nil && spec.HTTP != nil, spec.Redis == nil && spec.HTTP == nil:
			fail(path, errors.New("an enrichment needs exactly one of redis and http"))
			continue
		case spec.Redis != nil:
			e.Redis = true
			switch {
			case spec.Redis.Get != "" && spec.Redis.Hash == "":
				keySrc, keyPath, e.RedisMode = spec.Redis.Get, path+".redis.get", asyncio.GetJSON
			case spec.Redis.Hash != "" && spec.Redis.Get == "":
				keySrc, keyPath, e.RedisMode = spec.Redis.Hash, path+".redis.hash", asyncio.HashGetAll
			default:
				fail(path+".redis", errors.New("redis needs exactly one of get (a JSON value) and hash (HGETALL)"))
				continue
			}
		default:
			e.URL, e.Method, e.MaxBody = spec.HTTP.URL, strings.ToUpper(cmpOr(spec.HTTP.Method, "GET")), spec.HTTP.MaxBody
			if !strings.Contains(e.URL, "{key}") || !(strings.HasPrefix(e.URL, "http://") || strings.HasPrefix(e.URL, "https://")) {
				fail(path+".http.url", fmt.Errorf("url must be an http(s) URL with {key} in it, not %q", e.URL))
			}
			if e.Method != "GET" && e.Method != "POST" {
				fail(path+".http.method", fmt.Errorf("method must be GET or POST, not %q", spec.HTTP.Method))
			}
			if e.MaxBody == 0 {
				e.MaxBody = DefaultMaxBody
			}
			keySrc, keyPath = spec.HTTP.Key, path+".http.key"
			if keySrc == "" {
				fail(keyPath, errors.New("key is required: the expression whose value replaces {key}"))
				continue
			}
		}
		e.key = exprSource{src: string(keySrc), path: keyPath, scope: scopeEvent, stream: idx, kind: reflect.Interface}
		if _, _, err := c.compile(&e.key, &Context{}); err != nil {
			fail(keyPath, err)
		}
		if spec.Timeout <= 0 {
			fail(path+".timeout", errors.New("timeout is required and positive: it covers every attempt of one lookup"))
		}
		e.Config = asyncio.Config{Timeout: time.Duration(spec.Timeout) * time.Millisecond, Capacity: spec.Capacity,
			Retries: spec.Retries, Ordered: spec.Ordered}
		if spec.Cache != nil {
			e.Config.Cache, e.Config.CacheTTL = spec.Cache.Size, time.Duration(spec.Cache.TTL)*time.Millisecond
		}
		if spec.Fallback.V != nil {
			fb, ok := spec.Fallback.V.(map[string]any)
			if !ok {
				fail(path+".fallback", errors.New("fallback must be a mapping, e.g. {risk: UNKNOWN}"))
			}
			e.Config.Fallback = fb
		}
		if spec.Timeout > 0 {
			if err := e.Config.Validate(); err != nil {
				fail(path, err)
			}
		}
		rs.Streams[idx].Enrichments = append(rs.Streams[idx].Enrichments, len(rs.Enrichments))
		rs.Enrichments = append(rs.Enrichments, e)
	}
}

// EnrichKey evaluates enrichment i's key expression over an event.
func (e *Evaluator) EnrichKey(i int, fields map[string]any) (string, error) {
	p := e.enrichKey[i]
	out, err := e.run(p, MapFields(fields))
	if err != nil {
		return "", fmt.Errorf("enrichment %s key: %w", e.rs.Enrichments[i].Name, err)
	}
	s, ok := scalarString(out)
	if !ok {
		return "", fmt.Errorf("enrichment %s key must be a string or a number, not %T", e.rs.Enrichments[i].Name, out)
	}
	return s, nil
}

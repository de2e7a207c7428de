package api

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	yaml "go.yaml.in/yaml/v3"

	"github.com/vigil-cep/vigil/rules"
)

// kind is an item type of a ruleset document: a field of rules.Document
// holding a map of named specs.
type kind struct {
	plural   string // the document key and the URL segment: "rules"
	singular string // the backtest candidate key: "rule"
	// idField says whether the spec has an "id" field of its own (streams:
	// the event id expression), so that a body's "id" cannot name the item.
	idField bool
}

// documentKinds derives the item types from rules.Document, so that a new
// kind there gets its routes here without an edit.
func documentKinds() []kind {
	t := reflect.TypeFor[rules.Document]()
	var ks []kind
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || f.Type.Kind() != reflect.Map {
			continue
		}
		k := kind{plural: name, singular: strings.TrimSuffix(name, "s")}
		spec := f.Type.Elem()
		if spec.Kind() == reflect.Pointer {
			spec = spec.Elem()
		}
		for j := range spec.NumField() {
			tag, _, _ := strings.Cut(spec.Field(j).Tag.Get("yaml"), ",")
			if tag == "id" {
				k.idField = true
			}
		}
		ks = append(ks, k)
	}
	return ks
}

// document is a ruleset document as a generic tree, so that an edit keeps
// every field as written: kind -> name -> item, the values those of
// encoding/json (map[string]any, []any, string, bool, nil) plus integers.
// rules.Document is not used for edits because its types do not encode
// back to the written form (times, after_match, between, fallback).
type document map[string]any

// parseDocument reads a published document (YAML or JSON).
func parseDocument(src []byte) (document, error) {
	var v any
	if err := yaml.Unmarshal(src, &v); err != nil {
		return nil, fmt.Errorf("parse ruleset document: %w", err)
	}
	if v == nil {
		return document{}, nil
	}
	m, ok := normalize(v).(map[string]any)
	if !ok {
		return nil, errors.New("parse ruleset document: not a mapping")
	}
	return document(m), nil
}

// normalize turns YAML's and encoding/json's decoded values into one form:
// string map keys, json.Number as int64 or float64.
func normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = normalize(e)
		}
		return v
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = normalize(e)
		}
		return m
	case []any:
		for i, e := range v {
			v[i] = normalize(e)
		}
		return v
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		if f, err := v.Float64(); err == nil {
			return f
		}
		return v.String()
	}
	return v
}

// items returns the kind's items, or nil when the document has none.
func (d document) items(k string) map[string]any {
	m, _ := d[k].(map[string]any)
	return m
}

func (d document) item(k, name string) (map[string]any, bool) {
	v, ok := d.items(k)[name]
	if !ok {
		return nil, false
	}
	m, _ := v.(map[string]any)
	if m == nil { // "name: null" or a non-mapping: the item exists, empty
		m = map[string]any{}
	}
	return m, true
}

func (d document) set(k, name string, item map[string]any) {
	m := d.items(k)
	if m == nil {
		m = map[string]any{}
		d[k] = m
	}
	m[name] = item
}

func (d document) remove(k, name string) {
	m := d.items(k)
	delete(m, name)
	if len(m) == 0 {
		delete(d, k)
	}
}

// encode writes the document as indented JSON with sorted keys, so that
// the same content is the same bytes (and rules' error positions point at
// readable lines).
func (d document) encode() ([]byte, error) {
	return encodeJSON(map[string]any(d), "  ")
}

// canonical is v's compact JSON with sorted keys and no HTML escaping.
func canonical(v any) (json.RawMessage, error) {
	return encodeJSON(v, "")
}

func encodeJSON(v any, indent string) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode ruleset document as JSON: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// withName returns item with its name added, as the API shows items.
func withName(name string, item map[string]any) map[string]any {
	out := make(map[string]any, len(item)+1)
	maps.Copy(out, item)
	out["name"] = name
	return out
}

// versionIndex is a version's items as canonical JSON, for versions and
// audit listings. Immutable once built.
type versionIndex struct {
	items map[string]map[string]json.RawMessage // kind -> name -> item
	err   error                                 // the document did not parse
}

func buildIndex(src []byte) *versionIndex {
	doc, err := parseDocument(src)
	if err != nil {
		return &versionIndex{err: err}
	}
	ix := &versionIndex{items: map[string]map[string]json.RawMessage{}}
	for k := range doc {
		items := doc.items(k)
		if items == nil {
			continue
		}
		m := make(map[string]json.RawMessage, len(items))
		for name, item := range items {
			raw, err := canonical(item)
			if err != nil {
				return &versionIndex{err: err}
			}
			m[name] = raw
		}
		ix.items[k] = m
	}
	return ix
}

func (ix *versionIndex) get(k, name string) json.RawMessage {
	if ix == nil || ix.items == nil {
		return nil
	}
	return ix.items[k][name]
}

// versionCache keeps the indexes of recent versions: versions are
// immutable, and listings would otherwise parse every document each time.
type versionCache struct {
	mu struct {
		sync.Mutex
		m    map[string]*versionIndex // number/digest -> index
		fifo []string
	}
	size int
}

const versionCacheSize = 512

func (c *versionCache) init(size int) {
	c.size = size
	c.mu.m = make(map[string]*versionIndex, size)
}

func (c *versionCache) get(v *Version) *versionIndex {
	if v == nil {
		return &versionIndex{items: map[string]map[string]json.RawMessage{}}
	}
	key := strconv.FormatInt(v.Number, 10) + "/" + v.Digest
	c.mu.Lock()
	ix, ok := c.mu.m[key]
	c.mu.Unlock()
	if ok {
		return ix
	}
	ix = buildIndex(v.Document) // outside the lock: parsing is the slow part
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.mu.m[key]; !ok {
		if len(c.mu.fifo) >= c.size {
			delete(c.mu.m, c.mu.fifo[0])
			c.mu.fifo = c.mu.fifo[1:]
		}
		c.mu.m[key] = ix
		c.mu.fifo = append(c.mu.fifo, key)
	}
	return ix
}

// itemChange is one item-level difference between two versions.
type itemChange struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	Op   string `json:"op"` // added, removed, changed
	// Item is the new content of an added item, the old one of a removed one.
	Item json.RawMessage `json:"item,omitempty"`
	// Fields are the top-level fields of a changed item that differ.
	Fields map[string]fieldChange `json:"fields,omitempty"`
}

// fieldChange is a field's value before and after; absent when the field
// was not set.
type fieldChange struct {
	From json.RawMessage `json:"from,omitempty"`
	To   json.RawMessage `json:"to,omitempty"`
}

// diffIndexes lists what changed from a to b, by kind (in kinds' order,
// then any other key) and name.
func diffIndexes(kinds []kind, a, b *versionIndex) []itemChange {
	order := make([]string, 0, len(kinds))
	for _, k := range kinds {
		order = append(order, k.plural)
	}
	for k := range b.items {
		if !slices.Contains(order, k) {
			order = append(order, k)
		}
	}
	for k := range a.items {
		if !slices.Contains(order, k) {
			order = append(order, k)
		}
	}
	slices.SortStableFunc(order[len(kinds):], strings.Compare)
	changes := []itemChange{}
	for _, k := range order {
		names := slices.Sorted(maps.Keys(b.items[k]))
		for name := range a.items[k] {
			if _, ok := b.items[k][name]; !ok {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		for _, name := range names {
			before, after := a.get(k, name), b.get(k, name)
			switch {
			case before == nil:
				changes = append(changes, itemChange{Kind: k, Name: name, Op: "added", Item: after})
			case after == nil:
				changes = append(changes, itemChange{Kind: k, Name: name, Op: "removed", Item: before})
			case !bytes.Equal(before, after):
				changes = append(changes, itemChange{Kind: k, Name: name, Op: "changed", Fields: diffFields(before, after)})
			}
		}
	}
	return changes
}

func diffFields(before, after json.RawMessage) map[string]fieldChange {
	var a, b map[string]json.RawMessage
	if json.Unmarshal(before, &a) != nil || json.Unmarshal(after, &b) != nil {
		return map[string]fieldChange{"": {From: before, To: after}} // not objects
	}
	out := map[string]fieldChange{}
	for _, f := range slices.Sorted(maps.Keys(a)) {
		if !bytes.Equal(a[f], b[f]) {
			out[f] = fieldChange{From: a[f], To: b[f]}
		}
	}
	for f, v := range b {
		if _, ok := a[f]; !ok {
			out[f] = fieldChange{To: v}
		}
	}
	return out
}

// newestFirst pages versions (oldest first, as Backend.Versions gives
// them) newest first: at most limit of those numbered below before (0:
// from the newest). next is the before of the next page, 0 at the end.
func newestFirst(vs []*Version, before int64, limit int) (page []int, next int64) {
	for i := len(vs) - 1; i >= 0; i-- {
		if before > 0 && vs[i].Number >= before {
			continue
		}
		if len(page) == limit {
			return page, vs[page[len(page)-1]].Number
		}
		page = append(page, i)
	}
	return page, 0
}

// sortVersions orders versions oldest first (a Backend should already).
func sortVersions(vs []*Version) {
	slices.SortStableFunc(vs, func(a, b *Version) int { return cmp.Compare(a.Number, b.Number) })
}

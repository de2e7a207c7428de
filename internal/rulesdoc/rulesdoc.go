// Package rulesdoc is a ruleset document as a generic tree, for the tools
// that edit and compare documents rather than run them: the REST API's item
// edits, its audit log, `vigil rules push` and the service's switch log.
//
// rules.Document is not used here because its types do not encode back to
// the written form (times, after_match, between, fallback): an edit through
// it would rewrite fields the user did not touch. A Document keeps every
// field as written: kind -> name -> item, the values those of encoding/json
// (map[string]any, []any, string, bool, nil) plus integers.
//
// Everything here is a pure function of its arguments; an Index is
// immutable once built and safe for concurrent use.
package rulesdoc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/vigil-cep/vigil/rules"
)

// Kind is an item type of a ruleset document: a field of rules.Document
// holding a map of named specs.
type Kind struct {
	Plural   string // the document key and the REST URL segment: "rules"
	Singular string // the key of one candidate item: "rule"
	// IDField says whether the spec has an "id" field of its own (streams:
	// the event id expression), so that an item's "id" cannot name it.
	IDField bool
}

// Kinds derives the item types from rules.Document, in its field order, so
// that a new kind there is known here without an edit.
func Kinds() []Kind {
	t := reflect.TypeFor[rules.Document]()
	var ks []Kind
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || f.Type.Kind() != reflect.Map {
			continue
		}
		k := Kind{Plural: name, Singular: strings.TrimSuffix(name, "s")}
		spec := f.Type.Elem()
		if spec.Kind() == reflect.Pointer {
			spec = spec.Elem()
		}
		for j := range spec.NumField() {
			tag, _, _ := strings.Cut(spec.Field(j).Tag.Get("yaml"), ",")
			if tag == "id" {
				k.IDField = true
			}
		}
		ks = append(ks, k)
	}
	return ks
}

// Document is a ruleset document as a generic tree (see the package
// documentation).
type Document map[string]any

// Parse reads a document (YAML or JSON). An empty document is an empty
// Document.
func Parse(src []byte) (Document, error) {
	var v any
	if err := yaml.Unmarshal(src, &v); err != nil {
		return nil, fmt.Errorf("parse ruleset document: %w", err)
	}
	if v == nil {
		return Document{}, nil
	}
	m, ok := Normalize(v).(map[string]any)
	if !ok {
		return nil, errors.New("parse ruleset document: not a mapping")
	}
	return Document(m), nil
}

// Normalize turns YAML's and encoding/json's decoded values into one form:
// string map keys, json.Number as int64 or float64. It changes v in place
// where it can.
func Normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = Normalize(e)
		}
		return v
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = Normalize(e)
		}
		return m
	case []any:
		for i, e := range v {
			v[i] = Normalize(e)
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

// Items returns the kind's items, or nil when the document has none.
func (d Document) Items(kind string) map[string]any {
	m, _ := d[kind].(map[string]any)
	return m
}

// Item returns an item and whether it exists. An item written as null or
// as something other than a mapping exists, empty.
func (d Document) Item(kind, name string) (map[string]any, bool) {
	v, ok := d.Items(kind)[name]
	if !ok {
		return nil, false
	}
	m, _ := v.(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	return m, true
}

// Set adds or replaces an item.
func (d Document) Set(kind, name string, item map[string]any) {
	m := d.Items(kind)
	if m == nil {
		m = map[string]any{}
		d[kind] = m
	}
	m[name] = item
}

// Remove deletes an item, and the kind's section when it is left empty.
func (d Document) Remove(kind, name string) {
	m := d.Items(kind)
	delete(m, name)
	if len(m) == 0 {
		delete(d, kind)
	}
}

// Encode writes the document as indented JSON with sorted keys, so that
// the same content is the same bytes (and rules' error positions point at
// readable lines).
func (d Document) Encode() ([]byte, error) {
	return encodeJSON(map[string]any(d), "  ")
}

// Canonical is v's compact JSON with sorted keys and no HTML escaping.
func Canonical(v any) (json.RawMessage, error) {
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

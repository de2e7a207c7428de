package rules

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// Limits on documents, checked before or while parsing so that a hostile
// document costs little: its size, and the number of nodes visited (aliases
// are followed, so this also stops "billion laughs" expansions).
const (
	MaxDocumentBytes = 4 << 20
	maxNodesVisited  = 200_000
)

// Parse decodes a YAML or JSON ruleset document. It returns every structural
// error it finds (unknown fields, wrong types, bad durations) as an ErrorList
// with positions; expressions are compiled later, by Compile.
func Parse(src []byte) (*Document, error) {
	if len(src) > MaxDocumentBytes {
		return nil, ErrorList{{Path: "(document)", Err: fmt.Errorf("document is %d bytes, more than the limit of %d", len(src), MaxDocumentBytes)}}
	}
	var root yaml.Node
	if err := yaml.Unmarshal(src, &root); err != nil {
		return nil, ErrorList{yamlError(err, src)}
	}
	doc := &Document{lines: strings.Split(string(src), "\n")}
	d := &decoder{pos: make(map[string]Pos), lines: doc.lines}
	if len(root.Content) == 0 {
		return nil, ErrorList{{Path: "(document)", Line: 1, Column: 1, Err: errors.New("document is empty")}}
	}
	d.decode(root.Content[0], "", reflect.ValueOf(doc).Elem())
	doc.pos = d.pos
	if len(d.errs) > 0 {
		return nil, doc.withSnippets(d.errs).sorted()
	}
	return doc, nil
}

// yamlError turns a YAML syntax error ("yaml: line 3: ...") into a positioned
// CompileError with the source line. go-yaml gives no column, and its line
// is 1-based for scanner errors but 0-based for parser errors (the "did not
// find expected ..." ones, at the line where the unclosed mapping or
// sequence starts, or where the problem was found): those are moved one
// line down, and a line past the end of the text to its last line.
func yamlError(err error, src []byte) *CompileError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if n, convErr := strconv.Atoi(rest[:i]); convErr == nil {
				line, msg = n, strings.TrimSpace(rest[i+1:])
			}
		}
	}
	if yamlParserError(msg) {
		line++
	}
	lines := strings.Split(strings.TrimRight(string(src), "\n\r\t "), "\n")
	line = min(max(line, 1), len(lines))
	return &CompileError{Path: "(document)", Line: line, Column: 1, Err: errors.New(msg),
		Snippet: strings.ReplaceAll(strings.TrimRight(lines[line-1], "\r"), "\t", " ")}
}

// yamlParserError reports the messages of go-yaml's parser (as opposed to
// its scanner), whose line numbers are 0-based.
func yamlParserError(msg string) bool {
	for _, s := range []string{"<document start>", "node content", "expected key", "'-' indicator", "',' or ']'", "',' or '}'"} {
		if strings.HasPrefix(msg, "did not find expected") && strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// decoder walks a yaml.Node tree into Document types, collecting every error.
type decoder struct {
	errs    ErrorList
	pos     map[string]Pos
	lines   []string
	visited int
}

func (d *decoder) fail(n *yaml.Node, path string, err error) {
	d.errs = append(d.errs, &CompileError{Path: path, Line: n.Line, Column: n.Column, Err: err})
}

var (
	exprType     = reflect.TypeFor[Expr]()
	durationType = reflect.TypeFor[Duration]()
	decideType   = reflect.TypeFor[Decide]()
)

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func (d *decoder) decode(n *yaml.Node, path string, v reflect.Value) {
	d.visited++
	if d.visited > maxNodesVisited {
		if d.visited == maxNodesVisited+1 {
			d.fail(n, path, fmt.Errorf("document has more than %d nodes (aliases included)", maxNodesVisited))
		}
		return
	}
	if n.Kind == yaml.AliasNode {
		d.decode(n.Alias, path, v)
		return
	}
	if path != "" {
		d.pos[path] = Pos{n.Line, n.Column}
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // absent and null are the same: the zero value
	}
	if v.CanAddr() {
		if u, ok := v.Addr().Interface().(nodeDecoder); ok {
			u.decodeNode(d, n, path)
			return
		}
	}
	switch v.Type() {
	case exprType:
		if s, ok := d.scalar(n, path, "an expression"); ok {
			d.pos[path] = d.contentStart(n)
			v.SetString(s)
		}
		return
	case durationType:
		if s, ok := d.scalar(n, path, "a duration"); ok {
			dur, err := parseDuration(s)
			if err != nil {
				d.fail(n, path, err)
				return
			}
			v.SetInt(int64(dur))
		}
		return
	case decideType:
		if s, ok := d.scalar(n, path, "true, false, arrival or watermark"); ok {
			mode, err := parseDecide(s)
			if err != nil {
				d.fail(n, path, err)
				return
			}
			v.SetString(string(mode))
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		d.decode(n, path, p.Elem())
		v.Set(p)
	case reflect.Struct:
		d.decodeStruct(n, path, v)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(n, path, fmt.Errorf("want a list, not %s", kindName(n)))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content)))
		for i, item := range n.Content {
			d.decode(item, fmt.Sprintf("%s[%d]", path, i), v.Index(i))
		}
	case reflect.Map:
		d.decodeMap(n, path, v)
	case reflect.String:
		if s, ok := d.scalar(n, path, "a string"); ok {
			v.SetString(s)
		}
	case reflect.Bool:
		if s, ok := d.scalar(n, path, "true or false"); ok {
			b, err := strconv.ParseBool(s)
			if err != nil || n.Tag != "!!bool" {
				d.fail(n, path, fmt.Errorf("want true or false, not %q", s))
				return
			}
			v.SetBool(b)
		}
	case reflect.Int, reflect.Int64:
		if s, ok := d.scalar(n, path, "an integer"); ok {
			i, err := strconv.ParseInt(s, 10, v.Type().Bits())
			if err != nil || n.Tag != "!!int" {
				d.fail(n, path, fmt.Errorf("want an integer, not %q", s))
				return
			}
			v.SetInt(i)
		}
	case reflect.Float64:
		if s, ok := d.scalar(n, path, "a number"); ok {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil || (n.Tag != "!!int" && n.Tag != "!!float") {
				d.fail(n, path, fmt.Errorf("want a number, not %q", s))
				return
			}
			v.SetFloat(f)
		}
	default:
		panic(fmt.Sprintf("rules: no decoder for %s", v.Type())) // programmer error: a new field type
	}
}

// contentStart is where a scalar's text begins: after the quote of a quoted
// scalar, on the line after the indicator of a block scalar. Expression errors
// are positioned from there.
func (d *decoder) contentStart(n *yaml.Node) Pos {
	switch n.Style {
	case yaml.DoubleQuotedStyle, yaml.SingleQuotedStyle:
		return Pos{n.Line, n.Column + 1}
	case yaml.LiteralStyle, yaml.FoldedStyle:
		if n.Line < len(d.lines) {
			l := d.lines[n.Line]
			return Pos{n.Line + 1, len(l) - len(strings.TrimLeft(l, " ")) + 1}
		}
	}
	return Pos{n.Line, n.Column}
}

// nodeDecoder is implemented by document types with more than one written
// form (times: 3 or [2, 4]; after_match: a name or {skip_to_first: step}).
type nodeDecoder interface {
	decodeNode(d *decoder, n *yaml.Node, path string)
}

// scalar returns n's text, or records an error naming what was wanted.
func (d *decoder) scalar(n *yaml.Node, path, want string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, fmt.Errorf("want %s, not %s", want, kindName(n)))
		return "", false
	}
	return n.Value, true
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return "a scalar"
}

func (d *decoder) decodeStruct(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, fmt.Errorf("want a mapping, not %s", kindName(n)))
		return
	}
	t := v.Type()
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		name := k.Value
		if seen[name] {
			d.fail(k, joinPath(path, name), fmt.Errorf("field %q appears twice", name))
			continue
		}
		seen[name] = true
		field, ok := fieldByTag(t, name)
		if !ok {
			d.fail(k, joinPath(path, name), fmt.Errorf("unknown field %q (known: %s)", name, strings.Join(tagNames(t), ", ")))
			continue
		}
		d.decode(val, joinPath(path, name), v.FieldByIndex(field.Index))
	}
}

func (d *decoder) decodeMap(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, fmt.Errorf("want a mapping of names, not %s", kindName(n)))
		return
	}
	if v.IsNil() {
		v.Set(reflect.MakeMapWithSize(v.Type(), len(n.Content)/2))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		p := joinPath(path, k.Value)
		if err := checkName(k.Value); err != nil {
			d.fail(k, p, err)
			continue
		}
		if v.MapIndex(reflect.ValueOf(k.Value)).IsValid() {
			d.fail(k, p, fmt.Errorf("%q is defined twice", k.Value))
			continue
		}
		elem := reflect.New(v.Type().Elem()).Elem()
		d.decode(val, p, elem)
		v.SetMapIndex(reflect.ValueOf(k.Value), elem)
	}
}

// checkName accepts item names that are safe in paths, topics and metrics.
func checkName(s string) error {
	if s == "" || len(s) > 128 {
		return errors.New("names must have 1 to 128 characters")
	}
	for _, r := range s {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return fmt.Errorf("name %q: use letters, digits, '_' and '-' only", s)
		}
	}
	return nil
}

func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); tag == name && f.IsExported() {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func tagNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag != "" {
			names = append(names, tag)
		}
	}
	return names
}

// at returns the position of path's value, or of the nearest enclosing item.
func (doc *Document) at(path string) Pos {
	for p := path; p != ""; {
		if pos, ok := doc.pos[p]; ok {
			return pos
		}
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return Pos{}
}

// withSnippets fills in the source line under each positioned error.
func (doc *Document) withSnippets(errs ErrorList) ErrorList {
	for _, e := range errs {
		if e.Snippet == "" && e.Line > 0 && e.Line <= len(doc.lines) {
			e.Snippet = snippet(doc.lines[e.Line-1], e.Column)
		}
	}
	return errs
}

func snippet(line string, column int) string {
	line = strings.ReplaceAll(strings.TrimRight(line, "\r"), "\t", " ")
	if len(line) > 160 {
		line = line[:160] + "…"
	}
	return line + "\n" + strings.Repeat(" ", max(column-1, 0)) + "^"
}

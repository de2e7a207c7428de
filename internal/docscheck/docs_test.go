// Package docscheck holds one check and no code: the repository carries its
// own design document (docs/design.md), and code, test data and documents
// cite its sections by heading, as in docs/design.md "Watermarks" or
// docs/design.md#watermarks. TestCitations fails on every citation of a
// heading that the cited document does not have, and on every citation of the
// product contract the repository started from, which lives outside it (its
// numbered sections, "DESIGN" followed by a section sign), so that a reader
// of the repository alone can follow every reference.
package docscheck

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// TestCitations reads every file of the repository: the files git tracks
// and the new ones it does not ignore (build outputs and data directories
// are ignored), or every file under the root when git is not there. Binary
// files (a NUL byte) hold no citations and are passed over.
func TestCitations(t *testing.T) {
	root := repoRoot(t)
	files := repoFiles(t, root)
	if len(files) == 0 {
		t.Fatal("no file found in the repository")
	}
	docs := newDocs(root)
	var problems []problem
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			if os.IsNotExist(err) {
				continue // tracked, deleted in the working tree
			}
			t.Fatal(err)
		}
		if bytes.IndexByte(data, 0) >= 0 {
			continue
		}
		problems = append(problems, scan(f, string(data), docs)...)
	}
	slices.SortFunc(problems, func(a, b problem) int {
		if c := strings.Compare(a.file, b.file); c != 0 {
			return c
		}
		return a.line - b.line
	})
	problems = slices.Compact(problems)
	for _, p := range problems {
		t.Errorf("%s:%d: %s", p.file, p.line, p.msg)
	}
	if len(problems) > 0 {
		t.Logf("%d references in %d files of %d read: cite a section of %s by its heading, "+
			"as %s \"Heading\" or %s#heading; its headings: %s",
			len(problems), countFiles(problems), len(files), designDoc, designDoc, designDoc,
			strings.Join(docs.headings(designDoc), " | "))
	}
}

// TestScan holds the checker to what it must find. The citations it is fed
// are built from pieces, so that this file itself cites nothing.
func TestScan(t *testing.T) {
	sect := "\u00a7"
	d := designDoc
	docs := &docSet{byPath: map[string]*doc{
		d:           parseDoc("# Title\n\n## Event time\n\n### Watermarks\n\n```\n## Not a heading\n```\n## `Layout` table\n"),
		"README.md": parseDoc("# Vigil\n\n## Service\n"),
	}}
	for _, tt := range []struct {
		name, file, text string
		want             []string // "line: start of the message"
	}{
		{"contract section", "a.go", "// x\n// (DESIGN " + sect + "4 \"Watermarks\")\n", []string{"2: cites the product contract"}},
		{"lower case, split over two comment lines", "a.go", "// see design\n// " + sect + "2\n", []string{"1: cites the product contract"}},
		{"a list of sections", "a.go", "// (DESIGN " + sect + "2, " + sect + "4 \"Delivery\")\n", []string{"1: cites the product contract", "1: cites a numbered section"}},
		{"a standard's section", "a.go", "// (RFC 8259 " + sect + "8.1; RFC 7493, I-JSON, " + sect + "2.1)\n", nil},
		{"escaped in JSON", "a.json", "{\"d\": \"DESIGN \\" + "u00a75\"}", []string{"1: cites the product contract"}},
		{"heading that exists", "a.go", "// (" + d + " \"Watermarks\")\n", nil},
		{"with a comma, any case", "a.go", "// (" + d + ", \"event time\")\n", nil},
		{"heading split over lines", "a.yaml", "# (" + d + " \"Event\n# time\")\n", nil},
		{"heading with code", "a.go", "// " + d + " \"Layout table\"\n", nil},
		{"missing heading", "a.go", "// ok\n// " + d + " \"Decisions\": x\n", []string{"2: cites " + d + " \"Decisions\""}},
		{"a fenced line is no heading", "a.go", "// " + d + " \"Not a heading\"\n", []string{"1: cites " + d + " \"Not a heading\""}},
		{"escaped quotes in a Go string", "a.go", "s := \"(" + d + ", \\\"Delivery\\\")\"\n", []string{"1: cites " + d + " \"Delivery\""}},
		{"anchor that exists", "a.go", "// " + d + "#event-time\n", nil},
		{"missing anchor", "a.go", "// " + d + "#delivery\n", []string{"1: cites " + d + "#delivery"}},
		{"document that does not exist", "a.go", "// docs/nothing" + ".md \"X\"\n", []string{"1: cites docs/nothing" + ".md"}},
		{"not a citation: a list of paths", "a.json", "[\"" + d + "\", \"docs/x" + ".md\"]", nil},
		{"markdown link, same file", "README.md", "see [there](#service) and [here](#nowhere)\n", []string{"1: links README.md#nowhere"}},
		{"markdown link, relative", "docs/other" + ".md", "[w](design.md#watermarks), [x](design.md#x), [y](../README.md#service)\n", []string{"1: links " + d + "#x"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, p := range scan(tt.file, tt.text, docs) {
				got = append(got, fmt.Sprintf("%d: %s", p.line, p.msg))
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %q, want %d problems starting %q", got, len(tt.want), tt.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.want[i]) {
					t.Errorf("problem %d: got %q, want it to start %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// designDoc is the repository's design document (written in two pieces so
// that this file cites nothing).
const designDoc = "docs/design" + ".md"

type problem struct {
	file string
	line int
	msg  string
}

func countFiles(ps []problem) int {
	n := 0
	for i, p := range ps {
		if i == 0 || p.file != ps[i-1].file {
			n++
		}
	}
	return n
}

var (
	// contractRe finds a citation of the outside contract's numbered
	// sections: DESIGN, DESIGN.md or design, then a section sign (literal,
	// or escaped as JSON writes it).
	contractRe = regexp.MustCompile("(?i)\\bdesign(?:\\.md)?\\s*(?:\u00a7|\\\\u00a7)")
	// sectionRe finds any numbered section (a section sign and a number),
	// such as the second one of a list that contractRe's match starts. A
	// standard's (RFC 8259 and the like) is allowed: see standardRe.
	sectionRe = regexp.MustCompile("(?:\u00a7|\\\\u00a7)\\s*\\d")
	// standardRe, found shortly before a numbered section, makes it a
	// standard's.
	standardRe = regexp.MustCompile(`\b(?:RFC|ISO|IEEE|ECMA)\b`)
	// citeRe finds docs/NAME.md followed by a quoted heading (after an
	// optional comma; quotes may be escaped, as in a Go string) or an anchor.
	citeRe = regexp.MustCompile(`docs/([\w./-]+\.md)(?:#([\w-]+)|,?[ \t]*\\?"([^"\s,\\][^"\\]*)\\?")`)
	// linkRe finds a markdown link with an anchor: [text](path.md#anchor)
	// or [text](#anchor).
	linkRe = regexp.MustCompile(`\]\(([^()\s#]*)#([^()\s]+)\)`)
	// commentRe is what flatten takes off the start of a line: indentation
	// and comment markers (//, #, /*, *, <!--).
	commentRe = regexp.MustCompile(`^[ \t]*(?:(?://+|#+|/\*+|\*+|<!--)[ \t]*)?`)
)

// scan returns the problems of one file (its slash path under the root).
func scan(file, text string, docs *docSet) []problem {
	flat, starts := flatten(text)
	lineOf := func(off int) int { return sort.Search(len(starts), func(i int) bool { return starts[i] > off }) }
	var ps []problem
	reported := map[string]bool{} // line and target#anchor: a markdown link is also a citation
	contract := contractRe.FindAllStringIndex(flat, -1)
	for _, m := range contract {
		ps = append(ps, problem{file, lineOf(m[0]), fmt.Sprintf(
			"cites the product contract (%q), which is outside the repository: cite a section of %s by its heading instead",
			flat[m[0]:m[1]], designDoc)})
	}
	for _, m := range sectionRe.FindAllStringIndex(flat, -1) {
		if slices.ContainsFunc(contract, func(c []int) bool { return c[0] <= m[0] && m[0] < c[1] }) ||
			standardRe.MatchString(flat[max(0, m[0]-40):m[0]]) {
			continue
		}
		ps = append(ps, problem{file, lineOf(m[0]), fmt.Sprintf(
			"cites a numbered section (%q) of a document outside the repository: cite a section of %s by its heading instead",
			flat[m[0]:m[1]], designDoc)})
	}
	for _, m := range citeRe.FindAllStringSubmatchIndex(flat, -1) {
		target := "docs/" + flat[m[2]:m[3]]
		if m[4] >= 0 {
			anchor := flat[m[4]:m[5]]
			if msg := docs.check(target, "", anchor); msg != "" {
				ps = append(ps, problem{file, lineOf(m[0]), fmt.Sprintf("cites %s#%s: %s", target, anchor, msg)})
				reported[fmt.Sprintf("%d %s#%s", lineOf(m[0]), target, anchor)] = true
			}
			continue
		}
		heading := flat[m[6]:m[7]]
		if msg := docs.check(target, heading, ""); msg != "" {
			ps = append(ps, problem{file, lineOf(m[0]), fmt.Sprintf("cites %s %q: %s", target, heading, msg)})
		}
	}
	if strings.HasSuffix(file, ".md") {
		for _, m := range linkRe.FindAllStringSubmatchIndex(flat, -1) {
			target, anchor := flat[m[2]:m[3]], flat[m[4]:m[5]]
			switch {
			case target == "":
				target = file
			case strings.HasSuffix(target, ".md") && !strings.Contains(target, "://"):
				target = path.Join(path.Dir(file), target)
			default:
				continue
			}
			if reported[fmt.Sprintf("%d %s#%s", lineOf(m[0]), target, anchor)] {
				continue
			}
			if msg := docs.check(target, "", anchor); msg != "" {
				ps = append(ps, problem{file, lineOf(m[0]), fmt.Sprintf("links %s#%s: %s", target, anchor, msg)})
			}
		}
	}
	return ps
}

// flatten joins the lines of text with single spaces, each without its
// indentation and comment marker, so that a citation wrapped over two
// comment lines reads as one. starts[i] is where line i+1 begins in flat.
func flatten(text string) (flat string, starts []int) {
	var b strings.Builder
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\r\n")
		starts = append(starts, b.Len())
		b.WriteString(line[len(commentRe.FindString(line)):])
		b.WriteByte(' ')
	}
	return b.String(), starts
}

// docSet reads the cited documents once each.
type docSet struct {
	root   string
	byPath map[string]*doc // nil: the document does not exist
}

func newDocs(root string) *docSet { return &docSet{root: root, byPath: map[string]*doc{}} }

func (s *docSet) get(p string) *doc {
	d, ok := s.byPath[p]
	if !ok {
		if data, err := os.ReadFile(filepath.Join(s.root, filepath.FromSlash(p))); err == nil {
			d = parseDoc(string(data))
		}
		s.byPath[p] = d
	}
	return d
}

// check returns what is wrong with a citation of heading or anchor in the
// document at p, or "".
func (s *docSet) check(p, heading, anchor string) string {
	d := s.get(p)
	switch {
	case d == nil:
		return "no such document in the repository"
	case anchor != "" && !d.anchors[anchor]:
		return "the document has no heading with that anchor"
	case heading != "" && !d.titles[normTitle(heading)]:
		return "the document has no such heading"
	}
	return ""
}

func (s *docSet) headings(p string) []string {
	if d := s.get(p); d != nil {
		return d.list
	}
	return nil
}

// doc is what a markdown document offers to cite: its headings.
type doc struct {
	titles  map[string]bool // normTitle of each heading
	anchors map[string]bool // GitHub's anchor of each heading
	list    []string
}

// parseDoc reads the ATX headings of a markdown document, outside fenced
// code blocks.
func parseDoc(text string) *doc {
	d := &doc{titles: map[string]bool{}, anchors: map[string]bool{}}
	seen := map[string]int{}
	fence := ""
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\r\n")
		trimmed := strings.TrimLeft(line, " ")
		if f := fenceOf(trimmed); f != "" {
			switch {
			case fence == "":
				fence = f
			case strings.HasPrefix(f, fence) && strings.TrimSpace(strings.TrimLeft(trimmed, f[:1])) == "":
				fence = ""
			}
			continue
		}
		if fence != "" || len(line)-len(trimmed) > 3 {
			continue
		}
		hashes := len(trimmed) - len(strings.TrimLeft(trimmed, "#"))
		if hashes == 0 || hashes > 6 || (len(trimmed) > hashes && trimmed[hashes] != ' ' && trimmed[hashes] != '\t') {
			continue
		}
		title := strings.TrimSpace(strings.TrimRight(strings.TrimSpace(trimmed[hashes:]), "#"))
		if title == "" {
			continue
		}
		d.titles[normTitle(title)] = true
		d.list = append(d.list, title)
		a := anchorOf(title)
		if n := seen[a]; n > 0 {
			d.anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			d.anchors[a] = true
		}
		seen[a]++
	}
	return d
}

// fenceOf returns the fence a line opens or closes (``` or ~~~, or longer),
// or "".
func fenceOf(line string) string {
	for _, c := range []string{"`", "~"} {
		n := len(line) - len(strings.TrimLeft(line, c))
		if n >= 3 {
			return line[:n]
		}
	}
	return ""
}

// normTitle is a heading as citations compare it: without markdown code
// marks, spaces collapsed, lower case.
func normTitle(s string) string {
	return strings.ToLower(strings.Join(strings.Fields(strings.ReplaceAll(s, "`", "")), " "))
}

// anchorOf is GitHub's anchor for a heading: lower case, punctuation
// dropped (letters, digits, '-' and '_' stay), spaces turned to '-'.
func anchorOf(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// repoRoot is the module root: the directory above this package's whose
// go.mod declares the module.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil || !bytes.Contains(mod, []byte("module github.com/vigil-cep/vigil\n")) {
		t.Fatalf("%s is not the repository's root (go.mod: %v)", dir, err)
	}
	return dir
}

// repoFiles lists the repository's files as slash paths under root.
func repoFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		var files []string
		for _, f := range strings.Split(string(out), "\x00") {
			if f != "" {
				files = append(files, f)
			}
		}
		slices.Sort(files)
		return slices.Compact(files)
	} else {
		t.Logf("git ls-files: %v; reading every file under %s instead", err, root)
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && e.Name() == ".git" {
			return filepath.SkipDir
		}
		if e.Type().IsRegular() {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

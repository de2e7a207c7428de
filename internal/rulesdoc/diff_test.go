package rulesdoc

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDiffDocuments(t *testing.T) {
	const yamlDoc = `# comments and layout do not count
streams:
  tx: {topic: tx, key: user_id, time: ts, id: tx_id, decide: true}
rules:
  big:   {stream: tx, action: review, score: 10, when: amount > 100}
  gone:  {stream: tx, action: block, when: amount > 9000}
`
	// The same content as indented JSON (as REST item edits write it),
	// then with one rule changed, one removed and one added.
	const jsonDoc = `{
  "rules": {
    "big": {"action": "review", "score": 10, "stream": "tx", "when": "amount > 100"},
    "gone": {"action": "block", "stream": "tx", "when": "amount > 9000"}
  },
  "streams": {"tx": {"decide": true, "id": "tx_id", "key": "user_id", "time": "ts", "topic": "tx"}}
}`
	const edited = `
streams:
  tx: {topic: tx, key: user_id, time: ts, id: tx_id, decide: true}
windows:
  w: {stream: tx, tumbling: 1m, aggregate: {n: count()}}
rules:
  big: {stream: tx, action: block, score: 10, when: amount > 200}
`
	if got, err := DiffDocuments([]byte(yamlDoc), []byte(jsonDoc)); err != nil || len(got) != 0 {
		t.Errorf("YAML against the same content in JSON: %v, %v", got, err)
	}
	got, err := DiffDocuments([]byte(jsonDoc), []byte(edited))
	if err != nil {
		t.Fatal(err)
	}
	want := []Change{
		{Kind: "windows", Name: "w", Op: Added, Item: []byte(`{"aggregate":{"n":"count()"},"stream":"tx","tumbling":"1m"}`)},
		{Kind: "rules", Name: "big", Op: Changed, Fields: map[string]FieldChange{
			"action": {From: []byte(`"review"`), To: []byte(`"block"`)},
			"when":   {From: []byte(`"amount > 100"`), To: []byte(`"amount > 200"`)},
		}},
		{Kind: "rules", Name: "gone", Op: Removed, Item: []byte(`{"action":"block","stream":"tx","when":"amount > 9000"}`)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	if got := Names(got, Removed); !cmp.Equal(got, []string{"rules/gone"}) {
		t.Errorf("removed %v", got)
	}
	if got := got[1].FieldNames(); !cmp.Equal(got, []string{"action", "when"}) {
		t.Errorf("changed fields %v", got)
	}
	if got, err := DiffDocuments(nil, []byte(yamlDoc)); err != nil || len(got) != 3 {
		t.Errorf("from nothing: %v, %v", got, err)
	}
	if _, err := DiffDocuments([]byte("a: [\n"), nil); err == nil {
		t.Error("a document that does not parse: no error")
	}
}

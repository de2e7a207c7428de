package service

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
)

// TestEntityJSONFields: Entity.MarshalJSON writes every field of Entity, so that a field added to the struct cannot go missing from the API.
func TestEntityJSONFields(t *testing.T) {
	type plain Entity // encoding/json's own encoding, without MarshalJSON
	keys := func(v any) []string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.Unmarshal(b, &m)
		return slices.Sorted(maps.Keys(m))
	}
	e := Entity{Watermark: 1}
	if got, want := keys(e), keys(plain(e)); !slices.Equal(got, want) {
		t.Errorf("MarshalJSON writes %v, the struct has %v", got, want)
	}
}

package rules

import "slices"

// Fields is one event's fields as expressions read them. An event of a
// stream with DecodeFields is decoded into slots, one per name in that
// order, rather than into a map: no map is built for it, and a compiled
// program reads a field by its index. Other events come as a map.
type Fields struct {
	Map   map[string]any // when Slots is nil
	Slots []any          // the values of Names; Absent for a field the event lacks
	Names []string
}

// Absent fills the slot of a field an event lacks (a JSON null is nil).
var Absent any = absentField{}

type absentField struct{}

// MapFields returns the Fields of a field map.
func MapFields(m map[string]any) Fields { return Fields{Map: m} }

// get returns the value of field name, nil when the event lacks it, as a
// map index does; slot is name's index in Names as the program expects it,
// or -1.
func (f Fields) get(name string, slot int) any {
	if f.Slots == nil {
		return f.Map[name]
	}
	if slot < 0 || slot >= len(f.Names) || f.Names[slot] != name {
		if slot = slices.Index(f.Names, name); slot < 0 {
			return nil // not decoded: no expression of the stream reads it
		}
	}
	if v := f.Slots[slot]; v != Absent {
		return v
	}
	return nil
}

// AsMap returns the fields as a map: Map, or one built from the slots, for
// expr's VM and for callers that want the whole event.
func (f Fields) AsMap() map[string]any {
	if f.Slots == nil {
		return f.Map
	}
	m := make(map[string]any, len(f.Slots))
	for i, v := range f.Slots {
		if v != Absent {
			m[f.Names[i]] = v
		}
	}
	return m
}

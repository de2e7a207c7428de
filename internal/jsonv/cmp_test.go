package jsonv

import (
	"reflect"

	"github.com/google/go-cmp/cmp"
)

// cmpOpts makes go-cmp compare []any values with jsonEqual. Its default
// slice diffing compares nested slices repeatedly, and it calls a Comparer
// twice to check symmetry, so both take time exponential in the nesting
// depth: MaxDepth levels would never finish. Diffs then show a mismatched
// array whole.
var cmpOpts = cmp.Options{cmp.Comparer(func(x, y []any) bool { return jsonEqual(x, y) })}

// jsonEqual reports whether decoded JSON values x and y are equal, in time
// linear in their size.
func jsonEqual(x, y any) bool {
	switch x := x.(type) {
	case []any:
		y, ok := y.([]any)
		if !ok || len(x) != len(y) || (x == nil) != (y == nil) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := y.(map[string]any)
		if !ok || len(x) != len(y) || (x == nil) != (y == nil) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !jsonEqual(xv, yv) {
				return false
			}
		}
		return true
	default:
		return reflect.DeepEqual(x, y)
	}
}

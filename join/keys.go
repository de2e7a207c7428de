package join

// Keys yields every key the operator holds state for, in no particular
// order (for range op.Keys). The operator must not change meanwhile.
func (o *Operator) Keys(yield func(key string) bool) {
	for key := range o.keys {
		if !yield(key) {
			return
		}
	}
}

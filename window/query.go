package window

// Live calls fn with the current contents of each live window of key, in
// (start, end) order: the aggregates as they would fire now, Update set for
// a window that has fired already. It is for looking at a key's state (the
// entity API); it changes nothing.
func (o *Operator) Live(key string, fn func(Result)) {
	ks := o.keys.get(key)
	if ks == nil {
		return
	}
	for _, w := range ks.wins {
		vals := make([]any, len(o.kinds))
		for i, k := range o.kinds {
			if k == Count {
				vals[i] = w.count
			} else {
				vals[i] = w.accs[i].value(k)
			}
		}
		fn(Result{Key: w.key, Start: w.start, End: w.end, Values: vals, Update: w.fired})
	}
}

// Package cep matches sequence patterns over the events of one key with
// FlinkCEP's semantics: a Pattern is compiled once into an NFA, and each key
// keeps a State that is fed the key's events in time order.
//
// Conditions are plain Go functions (Condition): package rules compiles them
// from expr; cep never sees expr. A condition may read the events the partial
// match took so far through Partial, as FlinkCEP's IterativeCondition does.
//
// # Semantics
//
// The NFA is built as FlinkCEP's NFACompiler builds it, state for state:
// contiguity (Strict = next, Relaxed = followedBy, which takes the first
// matching event and cannot skip one, Any = followedByAny), quantifiers and
// their inner contiguity (consecutive, allowCombinations), optional, greedy,
// until, NotNext and NotFollowedBy (a trailing NotFollowedBy completes as a
// match when Within passes), Within (a partial match dies when
// time - start >= Within, checked before an event at that time runs), and the
// after-match skip strategies, which prune partial and not yet emitted
// matches by their start event. State.Process and State.Advance run
// FlinkCEP's NFA.process and NFA.advanceTime. Events are ordered by
// (Time, Seq), FlinkCEP's EventId.
//
// What Pattern does not express is not implemented: group patterns, per-step
// windows (WithinType.PREVIOUS_AND_CURRENT), processing time and
// throwExceptionOnMiss. Compile refuses a negative step right after another
// (FlinkCEP accepts it, but drops the first one's condition when the second
// ends the pattern) and times above 10,000 (one NFA state per occurrence). A
// partial match waiting in two NFA states at once (in a loop and for the step
// after it) times out once, where FlinkCEP reports it once per state.
//
// # Shared buffer
//
// A State keeps its partial matches' events in one shared buffer, as SASE+
// and FlinkCEP's SharedBuffer do. Every event a partial match takes adds an
// entry (event, step, predecessor entry); a partial match is the last entry of
// its branch, and the chain of predecessors is its match so far. When a
// partial match branches, the branches share the entries before the fork
// instead of copying them.
//
// FlinkCEP keys an entry by (state, event) in a key-value store, so an entry
// taken by several branches has several predecessor edges, each tagged with a
// Dewey number that tells the branches apart. Here an entry is a slice
// element: each branch that takes an event gets its own entry with its one
// predecessor, so the version of a branch is the identity of its last entry,
// extraction is a pointer walk that cannot be ambiguous, and the memory is the
// same (one entry per (branch, event) here, one edge per (branch, event)
// there).
//
// Entries and events are reference counted:
//
//   - an entry's count is the number of partial matches whose last entry it
//     is plus the number of entries whose predecessor it is;
//   - an event's count is the number of entries that hold it, plus one while
//     State.Process runs it;
//   - when a partial match ends (it completes, times out, fails, is pruned by
//     the skip strategy or dropped by the cap), its last entry is released;
//     an entry released to zero is freed and releases its predecessor and
//     event, so a branch frees exactly the suffix no other branch shares;
//   - an event released to zero is freed at once: Buffered counts the events
//     still held, and is 0 when no partial match is open.
//
// A condition runs at most once per event and partial match: the NFA tests it
// on several edges (take, and ignore as its negation), and reuses the result.
//
// Entries and events live in slices reused through free lists, and all the
// scratch space of a State is reused: processing an event that completes
// nothing allocates nothing once the slices have grown. A completed match is
// copied out of the buffer (two allocations) before the partial match that
// held it is released.
//
// # Invariants
//
// After every call to Process or Advance:
//
//   - the partial matches are ordered by start event, so the oldest is first,
//     the ones that time out are a prefix, and so are the ones a skip
//     strategy prunes;
//   - Len (open partial matches plus matches held back by a skip strategy)
//     is at most MaxPartials;
//   - a match is held back only under a skip strategy other than NoSkip, and
//     only while a partial match that started before it is open;
//   - after Advance(math.MaxInt64), Empty reports true.
//
// # Ownership
//
// An NFA and the States it made belong to the one goroutine that calls their
// methods: they have no locks, and the States share the NFA's scratch space
// (a key's state keeps none of its own: thousands of keys, one event at a
// time). The match and timeout callbacks run synchronously on that goroutine
// and must not call a State of the same NFA. Conditions run there too, during Process, and must not
// keep the slices Partial.Events returns. The caller keeps ownership of the
// Events it passes and must not modify them; cep holds them until no partial
// match refers to them. A Match or Timeout, with its slices, belongs to the
// callback that receives it.
//
// There is no clock: time moves only with the events' times and Advance,
// which the caller calls when the watermark passes. Advance to math.MaxInt64
// is the end of a bounded input: no partial match can continue, so each one
// ends (as its Within passing would end it, or silently without Within) and
// the matches a skip strategy held back behind them are emitted. A State
// whose Empty reports true holds nothing and can be deleted.
package cep

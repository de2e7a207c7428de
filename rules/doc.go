// Package rules turns a ruleset document (YAML or JSON, docs/design.md
// "Ruleset document") into a compiled Ruleset: Parse decodes the document
// keeping the position of every value, Compile validates it and compiles
// every expression with expr, and Load does both. Every mistake comes back at once, as an ErrorList of
// CompileErrors with the item's path, line and column.
//
// Expressions run in expr's VM over the event's decoded fields. Before expr
// sees a source, precheck applies the defences against hostile input (length,
// bracket depth, node count) and the cost rules (history() takes literal
// arguments and is never called inside a predicate). Patches then rewrite the
// tree: history feature shapes into native queries (features.go), history()
// arguments into indices, and member access on untyped values into a direct
// map or Row read.
//
// Ownership: a Ruleset is immutable once loaded and safe to share. Each task
// binds its own Evaluator (NewEvaluator), whose programs' functions read the
// task's Context; an Evaluator is used by one goroutine only. The ruleset's
// element predicates are registered while it loads and only looked up when it
// is bound, so tasks bind it concurrently without locks.
//
// Determinism: now() does not exist, dates are UTC, streams, windows and rules
// are ordered by name, and no map is iterated where order shows.
package rules

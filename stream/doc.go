// Package stream holds the time core every operator shares: the Event an input
// record becomes, and the watermark tracker that turns per-input event times into
// the task's event-time clock.
//
// Time is int64 milliseconds since the Unix epoch everywhere. MinTime means "no
// time yet" and MaxTime "the end of a bounded input".
//
// Ownership: a task owns its Watermarks and the Events it decodes; nothing here is
// safe for concurrent use, and nothing here needs to be, because one goroutine runs
// a task (docs/design.md "Architecture").
//
// Invariants of Watermarks:
//   - an input's watermark is max(maxSeen - maxOutOfOrder - 1, explicit), and never
//     goes back;
//   - the task watermark is the minimum over the inputs that are not idle, and never
//     goes back; while every input is idle it stays where it is;
//   - an input is idle once it has shown no activity (an event or an explicit
//     watermark) for its IdleAfter of processing time, read from the injected Clock.
package stream

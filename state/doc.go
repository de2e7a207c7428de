// Package state is the on-disk checkpoint store of a task. A task (partition
// p of every input topic) periodically serialises what it owns — history,
// windows, partial matches, join buffers, timers, dedup ids, watermarks —
// into named opaque sections, adds its input and output offsets, and saves
// the Snapshot through a Backend. On assignment it restores the Latest one
// and seeks to its offsets. The package never interprets sections or
// offsets.
//
// # File format (version 1)
//
// One snapshot is one file, written by Encode and read by Decode. Integers
// are varints in the canonical (shortest) form of encoding/binary: u =
// unsigned (Uvarint), s = signed zigzag (Varint). A string or byte string
// is a u length followed by the bytes.
//
//	magic     8 bytes  "VIGILCKP"
//	version   u        FormatVersion (1)
//	task      s        int32 range
//	seq       u
//	offsets   u count, then count × (name string, offset s), names strictly increasing
//	sections  u count, then count × (name string, data bytes), names strictly increasing
//	crc       4 bytes  CRC-32C (Castagnoli) of every byte before it, little endian
//
// Sorting the names makes the bytes a function of the snapshot's contents,
// not of map order, and Decode accepts only this canonical form, so
// Encode(Decode(b)) == b. Decode reads the version before checking the CRC
// so that a file written by a newer build is refused as such (*VersionError)
// rather than as corrupt; every count and length is checked against the
// bytes left before it is used, so a corrupt length cannot make Decode
// allocate more than the input. Decode's sections alias its input.
//
// # Files and atomicity
//
// Dir names a snapshot task-<task>-<seq as 20 digits>.ckpt, so that names
// sort by Seq. Save(s) goes through these steps; a crash after each leaves:
//
//  1. create task-<task>-<random>.tmp and write the encoding: a partial
//     temporary file; the snapshots are as before. Latest ignores temporary
//     files, and the task's next Save deletes them.
//  2. fsync the temporary file: the same; its contents are now durable.
//  3. rename it to its final name: on POSIX file systems the rename is
//     atomic, so the final name holds either nothing (or, when a damaged
//     file with the same Seq is being replaced, the old bytes) or the whole
//     new snapshot; never part of it.
//  4. fsync the directory: the rename is durable. Until this step a crash
//     may undo the rename; the previous snapshots are still there, so the
//     task restores the previous one and replays more input (at least once).
//  5. delete the task's files beyond the newest Keep (and any with a higher
//     Seq, which only damaged files skipped by Latest can have): a crash
//     leaves extra old files, which the next Save deletes. Deletions are not
//     fsynced for the same reason.
//
// A file that is torn or damaged anyway (a file system that does not honour
// fsync, a disk error, a truncation by hand) fails its CRC or length checks;
// Latest reports it to the OnCorrupt function and falls back to the next
// older snapshot. Keep (default 3) bounds how far back it can fall; with
// Keep(1) a damaged newest file leaves nothing.
//
// A Save's Seq must exceed the task's latest Seq: the one this Dir last
// saved or returned from Latest, or, before either, the highest on disk.
// After Latest has skipped damaged files, the task resumes from the Seq it
// got back, and its next Save replaces or deletes the damaged files.
//
// # Concurrency
//
// A Dir may be used by many goroutines: Save and Latest for different tasks
// run in parallel (each writes and deletes only its own task's files), and
// calls for the same task are serialised by a per-task lock (the lock is held
// through the fsyncs, so a second call for the same task waits for the
// first). The OnCorrupt function runs under that lock, on the caller's
// goroutine. Dir.mu, which only guards the map of per-task locks, is never
// held while a per-task lock is taken or I/O runs. A directory must be used
// by one Dir in one process at a time: Dir does not lock the directory
// against other processes. Save neither keeps nor modifies the snapshot
// passed to it; the caller must not modify it during the call.
package state

// Package state is the on-disk checkpoint store of a task. A task (partition
// p of every input topic) periodically serialises what it owns — history,
// windows, partial matches, join buffers, timers, dedup ids, watermarks —
// into named opaque sections, adds its input and output offsets, and saves
// the Snapshot through a Backend. On assignment it restores the newest
// Chain and seeks to the offsets of its last element. The package never
// interprets sections or offsets.
//
// # Chains
//
// A snapshot is either a base (Parent 0), complete in itself, or a delta:
// the changes since the snapshot whose Seq is its Parent. A task restores
// from a chain: a base followed by the deltas saved on it, each delta's
// Parent being the Seq of the element before it, by applying them in order.
// What a delta holds is up to the task; the package only keeps the links
// sound: Save accepts a delta only on the task's latest snapshot
// (ErrBrokenChain otherwise), and Chain returns only chains whose every
// element verifies.
//
// # File format (version 2)
//
// One snapshot is one file, written by Encode and read by Decode. Integers
// are varints in the canonical (shortest) form of encoding/binary: u =
// unsigned (Uvarint), s = signed zigzag (Varint). A string or byte string
// is a u length followed by the bytes.
//
//	magic     8 bytes  "VIGILCKP"
//	version   u        FormatVersion (2)
//	task      s        int32 range
//	seq       u
//	parent    u        0 for a base; absent in version 1
//	offsets   u count, then count × (name string, offset s), names strictly increasing
//	sections  u count, then count × (name string, data bytes), names strictly increasing
//	crc       4 bytes  CRC-32C (Castagnoli) of every byte before it, little endian
//
// Version 1 is the same without the parent field; Decode still reads it, as
// a base (Parent 0), and Encode writes only version 2. A version 1 file so
// restores as a one-element chain, and a task's first delta on it is saved
// in version 2.
//
// Sorting the names makes the bytes a function of the snapshot's contents,
// not of map order, and Decode accepts only this canonical form, so
// Encode(Decode(b)) == b for a version 2 file. Decode reads the version
// before checking the CRC so that a file written by a newer build is
// refused as such (*VersionError) rather than as corrupt; every count and
// length is checked against the bytes left before it is used, so a corrupt
// length cannot make Decode allocate more than the input. Decode's sections
// alias its input.
//
// # Files and atomicity
//
// Dir names a snapshot task-<task>-<seq as 20 digits>.ckpt, so that names
// sort by Seq; a delta's file holds its Parent, and its parent is the file
// named by that Seq. Save(s) goes through these steps; a crash after each
// leaves:
//
//  1. create task-<task>-<random>.tmp and write the encoding: a partial
//     temporary file; the snapshots are as before. Chain ignores temporary
//     files, and the task's next Save deletes them.
//  2. fsync the temporary file: the same; its contents are now durable.
//  3. rename it to its final name: on POSIX file systems the rename is
//     atomic, so the final name holds either nothing (or, when a damaged
//     file with the same Seq is being replaced, the old bytes) or the whole
//     new snapshot; never part of it.
//  4. fsync the directory: the rename is durable. Until this step a crash
//     may undo the rename; the previous snapshots are still there, so the
//     task restores the previous chain (for a delta, the chain up to its
//     parent) and replays more input (at least once).
//  5. prune: keep the newest Keep chains (the newest Keep bases, counting
//     the chain of s, and every file of their chains) and delete the rest:
//     older files, files with a Seq above the task's previous latest (only
//     damaged files that Chain skipped, or a crash, leave those), other
//     files inside a kept chain's Seq span, and the task's temporary files.
//     A crash leaves some of the files it would delete, which the next Save
//     deletes; the kept chains are whole, since only files outside them are
//     deleted. Deletions are not fsynced for the same reason.
//
// A file that is torn or damaged anyway (a file system that does not honour
// fsync, a disk error, a truncation or deletion by hand) fails its CRC or
// length checks, or is missing as a parent. Chain reports each such file to
// the OnCorrupt function and falls back to the newest chain that does not
// need it: a damaged newest delta leaves the chain up to its parent, a
// damaged delta in the middle the chain that ends just before it, and a
// damaged base (or a missing parent) an older chain, if Keep left one.
// Keep (default 3) bounds how many chains there are to fall back to; with
// Keep(1) a damaged base leaves nothing, while a damaged delta still leaves
// the part of its chain before it. A chain is only as durable as its
// weakest file: a long chain of deltas has more files that can break it, so
// a task saves a new base now and then, which also lets older chains go.
//
// A Save's Seq must exceed the task's latest Seq: the one this Dir last
// saved or the last element of the chain it last returned from Chain, or,
// before either, the highest on disk. A delta's Parent must be that latest
// Seq, known from a Save or a Chain of this Dir (a new Dir must restore or
// save a base first). After Chain has fallen back, the task resumes from the
// Seq it got back, and its next Save deletes the newer files Chain skipped
// (or replaces the one with its own Seq).
//
// # Concurrency
//
// A Dir may be used by many goroutines: Save and Chain for different tasks
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

// Package verify checks the invariants of docs/architecture.md (1-4, 6 and
// 8: the source ranges of every master that carries the flag, and no
// other) on the entries of the LB maps, and reads those entries from an open
// LBMaps or, read-only, from the maps pinned under a bpffs directory.
// CheckMaglev checks invariant 7 on the Maglev tables, read one at a time
// through a MaglevReader (a maps.MaglevMap, or OpenPinnedMaglev's
// read-only readers of the pins).
//
// Check is a pure function over a table.Dump: it reports every violation it
// finds, each naming its invariant, its kind, and the service and backend it
// concerns, in a deterministic order. It never repairs anything; restore
// (internal/table.Rebuild) does that.
//
// Format renders a table.Dump as one text line per entry (SVC:, BE:, REV:),
// every field shown, optionally with service and backend IDs replaced by
// ordinal names that do not depend on allocation order: the one dump format
// the tests compare maps with.
//
// Lifecycle: stateless. DumpPinned opens the pinned maps read-only and
// closes them before it returns; it never creates or changes a map.
//
// Error contract: Check and Format cannot fail. Dump and DumpPinned return errors
// prefixed with the operation; DumpPinned's wrap ErrNotPinned when a map is
// not pinned under the directory and maps.ErrIncompatible when a pinned map
// does not have the layout of actorlb's maps.
package verify

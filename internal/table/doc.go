// Package table is the engine's pure core: how a service becomes map
// entries (slot order, master and slot values, backend and revNAT entries),
// and how services are rebuilt from the entries read back from the pinned
// maps at restore, with every inconsistency repaired and reported.
//
// Lifecycle: functions over values; no state, no I/O, no goroutines.
//
// Error contract: nothing here fails; problems found in dumped maps are
// returned as Repairs together with the map writes that fix them.
package table

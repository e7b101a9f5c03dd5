// Package table is the engine's pure core: how a service becomes map
// entries (slot order, master and slot values, backend and revNAT entries),
// and how services are rebuilt from the entries read back from the pinned
// maps at restore, with every inconsistency repaired and reported.
//
// Lifecycle: functions over values; no state kept between calls and no I/O.
// Rebuild starts goroutines of its own (at most two at a time, at the two
// places its doc names: loading, and rule 5 of a large family,
// rebuildServices) and returns only when they are done. A Loader is
// Rebuild for a dump that comes in parts: its Backends and Services start
// the two loading goroutines early, as each part's entries arrive, and
// its Rebuild waits for them.
//
// Error contract: nothing here fails; problems found in dumped maps are
// returned as Repairs together with the map writes that fix them.
//
// # Files
//
//   - table.go: a service as map entries (the write side).
//   - load.go: the Dump, and its loading: normalized, one entry per key,
//     service entries grouped by frontend.
//   - rules.go: Rebuild and the repair rules below, one function each.
//   - fixes.go: the output: Restored, Fixes, Repair, RepairKind.
//   - backendset.go: the ID sets the rules use (dense array or map).
//
// # Restore rules
//
// Rebuild loads the dump (load.go), then applies these rules, each to what
// the rules before it left (rule 4 needs nothing of rules 1-3 and runs
// beside rules 1 and 2; Loader.Rebuild shows the order). "Deleted" means a key in Fixes;
// "dropped" means a slot left out of the rebuilt service, whose slots are
// then rewritten compacted. Each rule names the RepairKinds it emits and
// the Fixes lists it fills, with the list's place in the fix order below.
//
//  1. Slots without master (deleteSlotsWithoutMaster). A frontend with slot
//     entries but no master (slot 0) is gone: all its slots are deleted.
//     Its backends and revNAT entry are left to rules 6 and 7.
//     Emits slots-without-master. Fills SlotDeletes (5th).
//  2. Invalid frontends (removeInvalidFrontends). A frontend with a master
//     is removed (master and every slot deleted) if its address is invalid
//     or of the other family than its map, its master has rev_nat_index 0,
//     or its protocol or scope is unknown; the first of these found is
//     reported. Emits invalid-entry. Fills MasterDeletes (2nd) and
//     SlotDeletes (5th).
//  3. One frontend per service ID (dedupeServiceIDs). Of the frontends left
//     by rules 1 and 2 that share a service ID, in either family (one ID
//     space), the lowest frontend (address, port, protocol, scope) whose
//     revNAT entry in its own family's map has its address and port is
//     kept, or the lowest of all if none has; the others are removed as in
//     rule 2. Emits duplicate-service-id. Fills MasterDeletes (2nd) and
//     SlotDeletes (5th).
//  4. Valid, unique backends (filterBackends), per family in ID order:
//     (a) a backend with ID 0, an invalid address or one of the other
//     family, or an unknown protocol or state is deleted (invalid-entry);
//     (b) an ID left in both families' maps is deleted from the IPv6 map
//     (invalid-entry); (c) of the IDs left with one backend address
//     (address, port, protocol), the lowest is kept and the others deleted
//     as aliases of it, which rule 5 follows (duplicate-backend). Fills
//     BackendDeletes (6th).
//  5. Each kept service rebuilt from its slots (rebuildServices,
//     rebuildService). For each frontend kept by rules 1-3, slots
//     1..count+qcount of its master are read in order: a missing slot (or
//     one beyond 65535, which no key can hold) is dropped (missing-slot); a
//     slot whose backend ID is 0, absent after
//     rule 4 or in maintenance is dropped (dangling-slot); a slot naming
//     an alias of rule 4 is rewritten to the kept ID (duplicate-backend);
//     a slot whose backend is already in an earlier slot is dropped
//     (duplicate-backend if either slot named an alias, else
//     invalid-entry); a slot with another rev_nat_index than its master,
//     or with a count, qcount, flags or flags2, is rewritten
//     (invalid-entry);
//     slots beyond count+qcount are deleted (extra-slot). The backends
//     left are sorted by state (active, terminating, quarantined), keeping
//     their slot order within a state: if that moved one, or if nothing
//     was dropped and count/qcount do not match the states, slot-order. The spec comes
//     from the master (SpecFromMaster; an unknown LB algorithm becomes the
//     default, affinity with timeout 0 gets the default timeout), and a
//     master whose affinity/algorithm word, flags or flags2 differ from
//     what the engine writes for that spec is rewritten (invalid-entry). Fills
//     SlotWrites (3rd: slots 1..n that are missing or differ from Slots),
//     MasterWrites (4th: a master that differs from Master) and
//     SlotDeletes (5th: slots beyond the new n).
//  6. Orphan backends (deleteOrphanBackends). A backend left by rule 4 that
//     no rebuilt service has (by a slot, or by its lb_members entry: a
//     maintenance backend, one left out of a node-local set) is deleted.
//     Emits orphan-backend. Fills BackendDeletes (6th).
//  7. RevNAT entries follow the services (reconcileRevNAT). For each
//     rebuilt service: no entry with its ID in its family's map, written
//     (missing-revnat); an entry with another address or port, rewritten
//     (wrong-revnat); an entry with its ID in the other family's map,
//     deleted there (wrong-revnat). Every other entry is deleted: ID 0
//     (invalid-entry); the entry of a frontend of the same map family
//     removed by rule 2 or 3, with that ID, address and port
//     (invalid-entry); any other, an orphan, also
//     returned in Restored.OrphanRevNAT (orphan-revnat). Fills
//     RevNATWrites (1st) and RevNATDeletes (7th).
//  8. Members follow the services (reconcileMembers). lb_members holds
//     exactly MemberEntries of every rebuilt service: an entry of no
//     rebuilt service's backend is deleted, a missing or different one
//     written (member); so is a service record (kind MemberKindService)
//     of no service, with a backend ID, an unknown kind or an unknown
//     source (such a service is rebuilt as SourceAPI). Fills
//     Restored.Members.
//  9. Affinity matches follow the services (reconcileMembers):
//     lb_affinity_match holds exactly AffinityMatches of every rebuilt
//     service (affinity-match). Fills Restored.Members.
//  10. Source ranges follow the services (reconcileSourceRanges): a
//     service whose master carries FlagSourceRange is rebuilt (rule 5)
//     with the valid ranges lb4/lb6_source_range hold for its ID in its
//     family, in the engine's order (SortRanges), and SourceRangesDeny
//     from the master's Flag2SourceRangeDeny; if they hold none, rule 5
//     removes the service (source-range: rebuilt without ranges it would
//     be open to every client). Every other entry (of no such service, of
//     the other family, a key the engine never writes) is deleted
//     (source-range). Fills Restored.SourceRanges.
//
// Two scopes. Before rule 1, pairScopes attaches the internal-scope group
// of a frontend to its external-scope group when the external master
// describes a two-scope service (by its type and policy flags): the
// internal-scope key is then that service's, whatever its entries say,
// and rules 1-3 never see it (rule 2 removes it with its service). An
// internal-scope group whose external master is gone but whose own master
// describes a two-scope service is removed by rule 2. Rule 5 adds to a
// service the backends only its internal set names and the backends
// lb_members records for it (maintenance backends, and those left out of
// a node-local set), reads weights, node-local flags and the service's
// source (its record; none: SourceAPI) there, gives such
// a service the engine's order (state, then address), and rewrites its
// internal set from the rebuilt service (fixInnerScope).
//
// Fix order. The engine applies each family's Fixes (IPv4 first) in field
// order, make before break, so that the datapath, reading master -> slot -> backend
// concurrently, never meets a master counting more slots than are present
// or a slot naming a deleted backend, unless the dump already had one:
//
//  1. RevNATWrites (rule 7)
//  2. MasterDeletes (rules 2, 3)
//  3. SlotWrites (rule 5)
//  4. MasterWrites (rule 5)
//  5. SlotDeletes (rules 1, 2, 3, 5)
//  6. BackendDeletes (rules 4, 6)
//  7. RevNATDeletes (rule 7)
//
// Restored.Members (rules 8, 9) and Restored.SourceRanges (rule 10) are
// applied around them: their writes before the first family fix (a master
// carrying FlagSourceRange never without its ranges), their deletes after
// the last (a range goes only once no master carries the flag for it).
//
// Repairs, Services and every Fixes list are sorted at the end (finish),
// so the output depends neither on the order of the dump nor on the
// goroutines.
package table

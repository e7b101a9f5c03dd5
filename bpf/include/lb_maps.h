/* SPDX-License-Identifier: Apache-2.0 */
/*
 * actorlb's service maps as the datapath programs read them (layouts:
 * the maps package, upstream's lb4_key, lb4_service, lb4_backend, ...):
 * the structs, and the engine's maps that both the socket LB and the
 * packet LB use (max_entries here is a placeholder: the loaders hand in
 * the pinned maps).
 */
#ifndef ACTORLB_LB_MAPS_H
#define ACTORLB_LB_MAPS_H

#include "lb_types.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb4_key);
	__type(value, struct lb_service);
	__uint(max_entries, 65536);
} lb4_services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct lb4_backend);
	__uint(max_entries, 65536);
} lb4_backends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb6_key);
	__type(value, struct lb_service);
	__uint(max_entries, 65536);
} lb6_services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct lb6_backend);
	__uint(max_entries, 65536);
} lb6_backends SEC(".maps");

/* Weights (and restore data) of non-default memberships; written by the
 * engine. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb_member_key);
	__type(value, struct lb_member);
	__uint(max_entries, 65536);
} lb_members SEC(".maps");

#endif /* ACTORLB_LB_MAPS_H */

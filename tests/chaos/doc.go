// Package chaos holds actorlb's chaos tests: concurrent clients drive the
// engine while actors are killed and map writes fail, and a reader walks
// the maps as the datapath does; afterwards the maps must equal a pure
// reference model of every acknowledged operation.
//
// Lifecycle: each test pins its maps under its own bpffs directory.
//
// Error contract: every failure names the seed (TEST_SEED) to replay it.
package chaos

package conntrack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf"
)

// DefaultPerTick is how many entries a Tick reads at most by default.
const DefaultPerTick = 4096

// Bounds of Config.PerTick.
const (
	MinPerTick = 16
	MaxPerTick = 1 << 20
)

// Config configures a Scanner.
type Config struct {
	// Root is the bpffs directory the datapath pins its maps in
	// (<Root>/lb4_ct, ...).
	Root string
	// PerTick bounds the entries one Tick reads, over all maps
	// (0: DefaultPerTick; MinPerTick..MaxPerTick).
	PerTick int
	// Timeouts are the entries' lifetimes (zero fields: the defaults).
	Timeouts Timeouts
	// Clock returns the monotonic time in ns (nil: Monotonic). Tests
	// move it.
	Clock func() uint64
	// NoBatch reads by key iteration even where the kernel has batch
	// lookups (tests of the fallback).
	NoBatch bool
}

// Validate checks c; the error names the field.
func (c Config) Validate() error {
	if c.Root == "" {
		return fmt.Errorf("conntrack config: Root \"\": want the bpffs directory of the datapath's pins: %w", ErrInvalidConfig)
	}
	if c.PerTick != 0 && (c.PerTick < MinPerTick || c.PerTick > MaxPerTick) {
		return fmt.Errorf("conntrack config: PerTick %d: must be 0 (default %d) or between %d and %d: %w", c.PerTick, DefaultPerTick, MinPerTick, MaxPerTick, ErrInvalidConfig)
	}
	return c.Timeouts.Validate()
}

// MapStats are one conntrack map's figures.
type MapStats struct {
	Name    string
	Reverse bool // a reverse map (lb4_ct_rev, lb6_ct_rev)
	Is6     bool
	// Present: pinned with the expected shape at the start of the current
	// pass (or the last one).
	Present bool
	// Entries and Alive: the entries kept by the last complete pass of
	// this map, in total and by protocol.
	Entries int
	Alive   ProtoCounts
	// Totals since the scanner started: entries read, and deleted
	// because their flow expired or (reverse maps) their forward partner
	// was gone.
	Scanned        uint64
	DeletedExpired uint64
	DeletedOrphans uint64
}

// Stats are a Scanner's figures.
type Stats struct {
	// Maps in pass order: lb4_ct, lb4_ct_rev, lb6_ct, lb6_ct_rev.
	Maps []MapStats
	// Idle: no conntrack map was pinned at the start of the current pass
	// (no datapath attached); the scanner looks again at each pass.
	Idle bool
	// Ticks and complete passes so far; LastPass is how long the last
	// complete pass took, from its first tick to its last.
	Ticks, Passes uint64
	LastPass      time.Duration
	// Batch: entries are read with batch lookups (else key iteration).
	Batch bool
	// LookupErrors: partner lookups that failed (the entry was kept).
	LookupErrors uint64
	// Errors: ticks that failed; LastError is the last failure, or a
	// map whose pin has another shape ("" when none).
	Errors    uint64
	LastError string
}

// Deleted returns the entries deleted so far, expired and orphaned, of
// the maps of one family.
func (s Stats) Deleted(is6 bool) (expired, orphans uint64) {
	for _, m := range s.Maps {
		if m.Is6 == is6 {
			expired += m.DeletedExpired
			orphans += m.DeletedOrphans
		}
	}
	return expired, orphans
}

// TickReport says what one Tick did.
type TickReport struct {
	Scanned  int  // entries read
	Deleted  int  // entries deleted (of any map)
	PassDone bool // this tick ended a full pass
}

// rawOps reads and deletes in a table's layout (raw[K, V]).
type rawOps interface {
	readBatch(m *ebpf.Map, cursor *ebpf.MapBatchCursor, n int) (page, error)
	readIter(m *ebpf.Map, last []byte, n int) (page, error)
	del(m *ebpf.Map, keys [][]byte, batch bool) (int, error)
}

// table is one conntrack map and the scan's position in it.
type table struct {
	name               string
	reverse, is6       bool
	keySize, valueSize int
	ops                rawOps
	m                  *ebpf.Map // nil: not pinned (or incompatible)
	cursor             *ebpf.MapBatchCursor
	iter               bool   // this pass reads it by iteration
	last               []byte // iteration: the last key kept
	alive              ProtoCounts
	stats              MapStats
}

func newRaw[K, V any](kb func(*K) []byte, vb func(*V) []byte, mk func([]byte) K) *raw[K, V] {
	return &raw[K, V]{kb: kb, vb: vb, mk: mk}
}

// Scanner garbage-collects the conntrack maps pinned under a root, a
// bounded page at a time. It is not safe for concurrent use.
type Scanner struct {
	cfg       Config
	core      Collector
	tables    [4]*table
	pos       int // the table being scanned; len(tables): between passes
	passStart time.Time
	batch     bool
	stats     Stats
}

// NewScanner checks cfg and returns a Scanner. It opens nothing yet: the
// maps are opened from their pins at the start of each pass.
func NewScanner(cfg Config) (*Scanner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.PerTick == 0 {
		cfg.PerTick = DefaultPerTick
	}
	if cfg.Clock == nil {
		cfg.Clock = Monotonic
	}
	cfg.Timeouts = cfg.Timeouts.WithDefaults()
	s := &Scanner{cfg: cfg, core: Collector{Timeouts: cfg.Timeouts}, batch: !cfg.NoBatch}
	s.tables = [4]*table{
		{name: Forward4Name, keySize: Key4Size, valueSize: Entry4Size,
			ops: newRaw(func(k *[Key4Size]byte) []byte { return k[:] }, func(v *[Entry4Size]byte) []byte { return v[:] }, func(b []byte) [Key4Size]byte { return [Key4Size]byte(b) })},
		{name: Reverse4Name, reverse: true, keySize: Key4Size, valueSize: RevEntry4Size,
			ops: newRaw(func(k *[Key4Size]byte) []byte { return k[:] }, func(v *[RevEntry4Size]byte) []byte { return v[:] }, func(b []byte) [Key4Size]byte { return [Key4Size]byte(b) })},
		{name: Forward6Name, is6: true, keySize: Key6Size, valueSize: Entry6Size,
			ops: newRaw(func(k *[Key6Size]byte) []byte { return k[:] }, func(v *[Entry6Size]byte) []byte { return v[:] }, func(b []byte) [Key6Size]byte { return [Key6Size]byte(b) })},
		{name: Reverse6Name, reverse: true, is6: true, keySize: Key6Size, valueSize: RevEntry6Size,
			ops: newRaw(func(k *[Key6Size]byte) []byte { return k[:] }, func(v *[RevEntry6Size]byte) []byte { return v[:] }, func(b []byte) [Key6Size]byte { return [Key6Size]byte(b) })},
	}
	for _, t := range s.tables {
		t.stats = MapStats{Name: t.name, Reverse: t.reverse, Is6: t.is6}
	}
	s.pos = len(s.tables)
	return s, nil
}

// Stats returns a copy of the scanner's figures.
func (s *Scanner) Stats() Stats {
	st := s.stats
	st.Batch = s.batch
	st.Maps = make([]MapStats, len(s.tables))
	for i, t := range s.tables {
		st.Maps[i] = t.stats
	}
	return st
}

// Close releases the maps' file descriptors (the pins stay).
func (s *Scanner) Close() error {
	s.pos = len(s.tables) // the next Tick starts a pass, reopening the maps
	return s.closeMaps()
}

func (s *Scanner) closeMaps() error {
	var errs []error
	for _, t := range s.tables {
		if t.m != nil {
			errs = append(errs, t.m.Close())
			t.m = nil
		}
	}
	return errors.Join(errs...)
}

// open (re)opens every map from its pin, for a new pass. A map not
// pinned is skipped; one pinned with another shape is skipped and
// reported. A reverse map whose forward map is missing is skipped too:
// without its partners every entry would look orphaned.
func (s *Scanner) open() error {
	_ = s.closeMaps()
	var errs []error
	for _, t := range s.tables {
		t.cursor, t.last, t.iter, t.alive = nil, nil, !s.batch, ProtoCounts{}
		m, err := ebpf.LoadPinnedMap(filepath.Join(s.cfg.Root, t.name), nil)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("open %s: %w", t.name, err))
			continue
		}
		if (m.Type() != ebpf.LRUHash && m.Type() != ebpf.Hash) || int(m.KeySize()) != t.keySize || int(m.ValueSize()) != t.valueSize {
			errs = append(errs, fmt.Errorf("open %s: %s with key %d B and value %d B, want LRUHash with key %d B and value %d B: %w",
				t.name, m.Type(), m.KeySize(), m.ValueSize(), t.keySize, t.valueSize, ErrIncompatible))
			m.Close()
			continue
		}
		t.m = m
	}
	idle := true
	for i, t := range s.tables {
		if t.reverse && t.m != nil && s.tables[i-1].m == nil {
			t.m.Close()
			t.m = nil
		}
		t.stats.Present = t.m != nil
		idle = idle && t.m == nil
	}
	s.stats.Idle = idle
	return errors.Join(errs...)
}

// Tick reads at most PerTick entries from where the last tick stopped,
// deletes what the core decides, and ends the pass when the last map is
// done; the next tick then starts a new pass (reopening the maps). A map
// that fails is left for the next pass: Tick reports its error and goes
// on with the others.
func (s *Scanner) Tick() (TickReport, error) {
	s.stats.Ticks++
	var rep TickReport
	var errs []error
	if s.pos == len(s.tables) {
		s.passStart = time.Now()
		s.pos = 0
		if err := s.open(); err != nil {
			errs = append(errs, err)
		}
	}
	budget := s.cfg.PerTick
	// Each round reads a page, moves to the next table, or stops: at most
	// one short page per table and one round per entry of the budget.
	for rounds := 0; s.pos < len(s.tables) && rounds < s.cfg.PerTick+2*len(s.tables); rounds++ {
		t := s.tables[s.pos]
		if t.m == nil {
			s.pos++
			continue
		}
		if budget == 0 {
			break
		}
		p, err := s.read(t, budget)
		if err != nil {
			errs = append(errs, fmt.Errorf("scan %s: %w", t.name, err))
			s.pos++ // the rest of this map waits for the next pass
			continue
		}
		if len(p.keys) == 0 && !p.end {
			break // the next bucket does not fit in what is left
		}
		n, deleted, err := s.decide(s.pos, p)
		rep.Scanned += n
		rep.Deleted += deleted
		budget -= n
		if err != nil {
			errs = append(errs, fmt.Errorf("collect %s: %w", t.name, err))
		}
		if p.end {
			t.stats.Entries, t.stats.Alive = t.alive.Total(), t.alive
			s.pos++
		}
	}
	if s.pos == len(s.tables) {
		s.stats.Passes++
		s.stats.LastPass = time.Since(s.passStart)
		rep.PassDone = true
		for _, t := range s.tables {
			if t.m == nil {
				t.stats.Entries, t.stats.Alive = 0, ProtoCounts{}
			}
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		s.stats.Errors++
		s.stats.LastError = err.Error()
	}
	return rep, err
}

// read reads the next page of t, at most n entries. A bucket larger than
// a whole tick's budget, or a kernel without batch lookups, makes t fall
// back to iteration (from its start) for the rest of the pass.
func (s *Scanner) read(t *table, n int) (page, error) {
	if !t.iter {
		if t.cursor == nil {
			t.cursor = new(ebpf.MapBatchCursor)
		}
		p, err := t.ops.readBatch(t.m, t.cursor, n)
		switch {
		case errors.Is(err, ebpf.ErrNotSupported):
			s.batch = false
		case err != nil:
			return p, err
		case len(p.keys) == 0 && !p.end && n == s.cfg.PerTick:
		default:
			return p, nil
		}
		t.iter, t.cursor, t.last = true, nil, nil
	}
	return t.ops.readIter(t.m, t.last, n)
}

// decide runs the core on page p of table i and deletes what it decides.
// It returns the entries of the page and how many entries it deleted.
func (s *Scanner) decide(i int, p page) (int, int, error) {
	t := s.tables[i]
	fwd, rev := s.tables[i&^1], s.tables[i|1]
	partners := &mapPartners{fwd: fwd, rev: rev}
	now := s.cfg.Clock()
	var d Decision
	if t.reverse {
		items := make([]ReverseItem, len(p.keys))
		for j := range p.keys {
			if err := items[j].Key.UnmarshalBinary(p.keys[j]); err != nil {
				return 0, 0, err
			}
			if err := items[j].Entry.UnmarshalBinary(p.vals[j]); err != nil {
				return 0, 0, err
			}
		}
		d = s.core.Reverse(items, now, partners)
	} else {
		items := make([]ForwardItem, len(p.keys))
		for j := range p.keys {
			if err := items[j].Key.UnmarshalBinary(p.keys[j]); err != nil {
				return 0, 0, err
			}
			if err := items[j].Entry.UnmarshalBinary(p.vals[j]); err != nil {
				return 0, 0, err
			}
		}
		d = s.core.Forward(items, now, partners)
	}
	t.stats.Scanned += uint64(d.Counts.Scanned)
	t.alive = t.alive.Plus(d.Counts.Alive)
	s.stats.LookupErrors += uint64(d.Counts.LookupErrors)

	var errs []error
	total := 0
	del := func(tb *table, keys []Key, counter *uint64) map[string]bool {
		gone := map[string]bool{}
		if len(keys) == 0 || tb.m == nil {
			return gone
		}
		raw := make([][]byte, 0, len(keys))
		for _, k := range keys {
			b, err := k.MarshalBinary()
			if err != nil || len(b) != tb.keySize {
				errs = append(errs, fmt.Errorf("delete from %s: key %s: %w", tb.name, k, ErrFamily))
				continue
			}
			raw = append(raw, b)
			gone[string(b)] = true
		}
		n, err := tb.ops.del(tb.m, raw, s.batch)
		if err != nil {
			errs = append(errs, fmt.Errorf("delete from %s: %w", tb.name, err))
		}
		*counter += uint64(n)
		total += n
		return gone
	}
	goneF := del(fwd, d.Forward, &fwd.stats.DeletedExpired)
	goneR := del(rev, d.ReverseExpired, &rev.stats.DeletedExpired)
	goneO := del(rev, d.ReverseOrphans, &rev.stats.DeletedOrphans)
	if t.iter {
		// Iteration goes on after the page's last key that still exists
		// (after a deleted key, NextKey would start over).
		for j := len(p.keys) - 1; j >= 0; j-- {
			k := string(p.keys[j])
			if (t.reverse && !goneR[k] && !goneO[k]) || (!t.reverse && !goneF[k]) {
				t.last = append(t.last[:0], p.keys[j]...)
				break
			}
		}
	}
	return len(p.keys), total, errors.Join(errs...)
}

// mapPartners answers the core's partner lookups from a family's maps.
type mapPartners struct{ fwd, rev *table }

func lookup(t *table, k Key, out interface{ UnmarshalBinary([]byte) error }) (bool, error) {
	if t.m == nil {
		return false, nil
	}
	kb, err := k.MarshalBinary()
	if err != nil {
		return false, err
	}
	if len(kb) != t.keySize {
		return false, fmt.Errorf("lookup in %s: key %s: %w", t.name, k, ErrFamily)
	}
	vb := make([]byte, t.valueSize)
	if err := t.m.Lookup(kb, vb); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("lookup in %s: %w", t.name, err)
	}
	return true, out.UnmarshalBinary(vb)
}

func (p *mapPartners) Forward(k Key) (Entry, bool, error) {
	var e Entry
	found, err := lookup(p.fwd, k, &e)
	return e, found, err
}

func (p *mapPartners) Reverse(k Key) (RevEntry, bool, error) {
	var v RevEntry
	found, err := lookup(p.rev, k, &v)
	return v, found, err
}

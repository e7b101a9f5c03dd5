package conntrack

import (
	"fmt"
	"time"
)

// Default lifetimes of SPEC17's GC rule.
const (
	DefaultTCPClosing     = 10 * time.Second
	DefaultTCPNotReplied  = 60 * time.Second
	DefaultTCPEstablished = 21600 * time.Second
	DefaultOther          = 60 * time.Second
)

// maxLifetime bounds a configured lifetime (a year): beyond it a typo is
// more likely than intent.
const maxLifetime = 365 * 24 * time.Hour

// Timeouts are the lifetimes of conntrack entries: an entry is expired
// when now - last_seen exceeds its lifetime. A zero field takes its
// default (WithDefaults).
type Timeouts struct {
	TCPClosing     time.Duration // TCP with FIN or RST seen (FlagClosing)
	TCPNotReplied  time.Duration // TCP without a reply seen (no FlagReplied)
	TCPEstablished time.Duration // other TCP
	Other          time.Duration // UDP and every other protocol
}

// DefaultTimeouts are SPEC17's: 10 s, 60 s, 21600 s, 60 s.
func DefaultTimeouts() Timeouts {
	return Timeouts{TCPClosing: DefaultTCPClosing, TCPNotReplied: DefaultTCPNotReplied, TCPEstablished: DefaultTCPEstablished, Other: DefaultOther}
}

// WithDefaults returns t with every zero field set to its default.
func (t Timeouts) WithDefaults() Timeouts {
	d := DefaultTimeouts()
	for _, f := range []struct{ v, def *time.Duration }{
		{&t.TCPClosing, &d.TCPClosing}, {&t.TCPNotReplied, &d.TCPNotReplied},
		{&t.TCPEstablished, &d.TCPEstablished}, {&t.Other, &d.Other},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	return t
}

// Validate checks every field of t: zero (the default) or between 1 s and
// a year. The error names the field.
func (t Timeouts) Validate() error {
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"TCPClosing", t.TCPClosing}, {"TCPNotReplied", t.TCPNotReplied}, {"TCPEstablished", t.TCPEstablished}, {"Other", t.Other}} {
		if f.v != 0 && (f.v < time.Second || f.v > maxLifetime) {
			return fmt.Errorf("timeouts: %s %s: must be 0 (default) or between 1s and %s: %w", f.name, f.v, maxLifetime, ErrInvalidConfig)
		}
	}
	return nil
}

// Lifetime is how long a forward entry of protocol proto with flags lives
// without a packet.
func (t Timeouts) Lifetime(proto, flags uint8) time.Duration {
	switch {
	case proto != ProtoTCP:
		return t.Other
	case flags&FlagClosing != 0:
		return t.TCPClosing
	case flags&FlagReplied == 0:
		return t.TCPNotReplied
	}
	return t.TCPEstablished
}

// Expired reports whether forward entry e of protocol proto is expired at
// monotonic time now (ns). An entry seen after now (a packet that came
// while the page was read) is not.
func (t Timeouts) Expired(e Entry, proto uint8, now uint64) bool {
	return now > e.LastSeen && now-e.LastSeen > uint64(t.Lifetime(proto, e.Flags))
}

// Partners looks entries up in the other map of a family: the scanner
// answers from the kernel's maps, tests from a table. found is false when
// the key is absent; err reports a lookup that failed (the entry asked
// about is then kept).
type Partners interface {
	Forward(k Key) (e Entry, found bool, err error)
	Reverse(k Key) (v RevEntry, found bool, err error)
}

// ForwardItem is one entry read from a forward map.
type ForwardItem struct {
	Key   Key
	Entry Entry
}

// ReverseItem is one entry read from a reverse map.
type ReverseItem struct {
	Key   Key
	Entry RevEntry
}

// ProtoCounts counts entries by protocol.
type ProtoCounts struct{ TCP, UDP, Other int }

func (p *ProtoCounts) add(proto uint8) {
	switch proto {
	case ProtoTCP:
		p.TCP++
	case ProtoUDP:
		p.UDP++
	default:
		p.Other++
	}
}

// Total is TCP + UDP + Other.
func (p ProtoCounts) Total() int { return p.TCP + p.UDP + p.Other }

// Plus returns p + q.
func (p ProtoCounts) Plus(q ProtoCounts) ProtoCounts {
	return ProtoCounts{TCP: p.TCP + q.TCP, UDP: p.UDP + q.UDP, Other: p.Other + q.Other}
}

// Counts are what the core saw in one page.
type Counts struct {
	Scanned int // entries of the page
	// Expired: entries of the page found expired (a reverse entry is
	// when its forward partner is).
	Expired int
	// Orphans: reverse entries of the page whose forward partner is
	// missing, is in DSR mode, or names another reverse key.
	Orphans int
	// LookupErrors: partner lookups that failed; the entry was kept.
	LookupErrors int
	// Alive: entries of the page kept, by protocol.
	Alive ProtoCounts
}

// Decision is what to delete after one page, and what the page held.
type Decision struct {
	// Forward: forward keys to delete (expired; from a reverse page,
	// the expired partners of its entries).
	Forward []Key
	// ReverseExpired: reverse keys to delete because their flow expired.
	ReverseExpired []Key
	// ReverseOrphans: reverse keys to delete because their forward
	// partner is gone.
	ReverseOrphans []Key
	Counts         Counts
}

// Collector is the GC's deterministic core: no I/O, no clock. The zero
// value uses DefaultTimeouts.
type Collector struct {
	Timeouts Timeouts
}

// Forward decides on a page of a forward map at monotonic time now: an
// expired entry is deleted, and with it its reverse partner when that
// exists and names this entry's key (a partner that names another flow,
// after the NAT port was reused, is left to that flow).
func (c Collector) Forward(page []ForwardItem, now uint64, p Partners) Decision {
	t := c.Timeouts.WithDefaults()
	var d Decision
	for _, it := range page {
		d.Counts.Scanned++
		if !t.Expired(it.Entry, it.Key.Proto, now) {
			d.Counts.Alive.add(it.Key.Proto)
			continue
		}
		d.Counts.Expired++
		d.Forward = append(d.Forward, it.Key)
		rk, ok := it.Entry.ReverseKey(it.Key)
		if !ok {
			continue
		}
		v, found, err := p.Reverse(rk)
		switch {
		case err != nil:
			d.Counts.LookupErrors++ // left for the reverse scan, which finds it orphaned
		case found && v.ForwardKey(rk) == it.Key:
			d.ReverseExpired = append(d.ReverseExpired, rk)
		}
	}
	return d
}

// Reverse decides on a page of a reverse map at monotonic time now: an
// entry whose forward partner is missing, in DSR mode or pointing at
// another reverse key is an orphan; one whose partner is expired is
// deleted with that partner; the others live as long as their partner.
func (c Collector) Reverse(page []ReverseItem, now uint64, p Partners) Decision {
	t := c.Timeouts.WithDefaults()
	var d Decision
	for _, it := range page {
		d.Counts.Scanned++
		fk := it.Entry.ForwardKey(it.Key)
		e, found, err := p.Forward(fk)
		if err != nil {
			d.Counts.LookupErrors++
			d.Counts.Alive.add(it.Key.Proto)
			continue
		}
		if rk, ok := e.ReverseKey(fk); !found || !ok || rk != it.Key {
			d.Counts.Orphans++
			d.ReverseOrphans = append(d.ReverseOrphans, it.Key)
			continue
		}
		if t.Expired(e, fk.Proto, now) {
			d.Counts.Expired++
			d.ReverseExpired = append(d.ReverseExpired, it.Key)
			d.Forward = append(d.Forward, fk)
			continue
		}
		d.Counts.Alive.add(it.Key.Proto)
	}
	return d
}

package conntrack

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakePartners answers from tables, and fails lookups of the keys in fail.
type fakePartners struct {
	fwd  map[Key]Entry
	rev  map[Key]RevEntry
	fail map[Key]bool
}

func (f *fakePartners) Forward(k Key) (Entry, bool, error) {
	if f.fail[k] {
		return Entry{}, false, errors.New("lookup: injected")
	}
	e, ok := f.fwd[k]
	return e, ok, nil
}

func (f *fakePartners) Reverse(k Key) (RevEntry, bool, error) {
	if f.fail[k] {
		return RevEntry{}, false, errors.New("lookup: injected")
	}
	v, ok := f.rev[k]
	return v, ok, nil
}

const sec = uint64(time.Second)

// flow builds a SNAT flow n of proto: its forward key and entry, its
// reverse key and entry, last seen at lastSeen.
func flow(n uint16, proto, flags uint8, lastSeen uint64) (Key, Entry, Key, RevEntry) {
	fk := Key{Src: netip.AddrFrom4([4]byte{10, 0, byte(n >> 8), byte(n)}), Dst: vip4, SrcPort: 40000 + n, DstPort: 80, Proto: proto}
	e := Entry{LastSeen: lastSeen, BackendID: 1, Flags: flags, BackendAddr: backend4, BackendPort: 8080, NATAddr: nat4, NATPort: 30000 + n}
	rk, _ := e.ReverseKey(fk)
	v := RevEntry{LastSeen: lastSeen, Client: fk.Src, Frontend: fk.Dst, ClientPort: fk.SrcPort, FrontendPort: fk.DstPort}
	return fk, e, rk, v
}

// Each rule of SPEC17's lifetimes, just inside and just past the limit.
func TestLifetimesFollowProtocolAndFlags(t *testing.T) {
	now := 100000 * sec
	tests := []struct {
		name   string
		proto  uint8
		flags  uint8
		maxAge time.Duration
	}{
		{"TCP closing", ProtoTCP, FlagClosing | FlagReplied, DefaultTCPClosing},
		{"TCP not replied", ProtoTCP, 0, DefaultTCPNotReplied},
		{"TCP established", ProtoTCP, FlagReplied, DefaultTCPEstablished},
		{"TCP closing without reply", ProtoTCP, FlagClosing, DefaultTCPClosing},
		{"UDP", ProtoUDP, FlagReplied, DefaultOther},
		{"SCTP", 132, 0, DefaultOther},
		{"UDP DSR", ProtoUDP, FlagDSR | FlagClosing, DefaultOther},
	}
	var c Collector // zero value: the defaults
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fk, e, _, _ := flow(1, tt.proto, tt.flags, now-uint64(tt.maxAge))
			d := c.Forward([]ForwardItem{{fk, e}}, now, &fakePartners{})
			require.Empty(t, d.Forward, "at exactly its lifetime an entry lives")
			require.Equal(t, 1, d.Counts.Alive.Total())
			e.LastSeen--
			d = c.Forward([]ForwardItem{{fk, e}}, now, &fakePartners{})
			require.Equal(t, []Key{fk}, d.Forward, "one ns past its lifetime it is expired")
			require.Equal(t, 1, d.Counts.Expired)
		})
	}
}

// A page of forward entries: the expired ones go with their reverse
// partners, unless the partner now names another flow, is missing, or
// cannot be looked up; DSR entries have no partner; an entry seen after
// now lives.
func TestForwardPageDeletesExpiredWithPartners(t *testing.T) {
	now := 1000 * sec
	p := &fakePartners{fwd: map[Key]Entry{}, rev: map[Key]RevEntry{}, fail: map[Key]bool{}}
	var page []ForwardItem
	add := func(n uint16, proto, flags uint8, age uint64) (Key, Key) {
		fk, e, rk, v := flow(n, proto, flags, now-age)
		p.fwd[fk], p.rev[rk] = e, v
		page = append(page, ForwardItem{fk, e})
		return fk, rk
	}
	live, _ := add(1, ProtoTCP, FlagReplied, 3600*sec)
	oldTCP, oldTCPRev := add(2, ProtoTCP, FlagReplied|FlagClosing, 11*sec)
	oldUDP, oldUDPRev := add(3, ProtoUDP, 0, 61*sec)
	dsr, _ := add(4, ProtoUDP, FlagDSR, 61*sec)
	reused, reusedRev := add(5, ProtoTCP, 0, 61*sec)
	p.rev[reusedRev] = RevEntry{Client: client4, Frontend: vip4, ClientPort: 1, FrontendPort: 80} // the NAT port now serves another flow
	noPartner, noPartnerRev := add(6, ProtoUDP, 0, 61*sec)
	delete(p.rev, noPartnerRev)
	failing, failingRev := add(7, ProtoUDP, 0, 61*sec)
	p.fail[failingRev] = true
	fk, e, _, _ := flow(8, ProtoUDP, 0, now+sec) // seen while the page was read
	page = append(page, ForwardItem{fk, e})

	d := Collector{}.Forward(page, now, p)
	require.Equal(t, []Key{oldTCP, oldUDP, dsr, reused, noPartner, failing}, d.Forward)
	require.Equal(t, []Key{oldTCPRev, oldUDPRev}, d.ReverseExpired)
	require.Empty(t, d.ReverseOrphans)
	require.Equal(t, Counts{Scanned: 8, Expired: 6, LookupErrors: 1, Alive: ProtoCounts{TCP: 1, UDP: 1}}, d.Counts)
	require.NotContains(t, d.Forward, live)
}

// A page of reverse entries: orphans (no forward partner, a DSR partner,
// a partner that points elsewhere) go; one whose partner expired goes
// with it; one whose partner lives stays, however old its own last_seen;
// a failed lookup keeps it.
func TestReversePageDeletesOrphansAndExpiredFlows(t *testing.T) {
	now := 1000 * sec
	p := &fakePartners{fwd: map[Key]Entry{}, rev: map[Key]RevEntry{}, fail: map[Key]bool{}}
	var page []ReverseItem
	add := func(n uint16, proto, flags uint8, age uint64) (Key, Key) {
		fk, e, rk, v := flow(n, proto, flags, now-age)
		p.fwd[fk], p.rev[rk] = e, v
		v.LastSeen = 0 // only the forward entry's last_seen counts
		page = append(page, ReverseItem{rk, v})
		return fk, rk
	}
	_, live := add(1, ProtoTCP, FlagReplied, 3600*sec)
	goneFwd, orphan := add(2, ProtoTCP, FlagReplied, 0)
	delete(p.fwd, goneFwd)
	dsrFwd, dsrOrphan := add(3, ProtoUDP, 0, 0)
	e := p.fwd[dsrFwd]
	e.Flags |= FlagDSR
	p.fwd[dsrFwd] = e
	movedFwd, moved := add(4, ProtoUDP, 0, 0)
	e = p.fwd[movedFwd]
	e.NATPort++ // the forward entry now uses another NAT port
	p.fwd[movedFwd] = e
	expiredFwd, expired := add(5, ProtoUDP, 0, 61*sec)
	failFwd, failing := add(6, ProtoUDP, 0, 61*sec)
	p.fail[failFwd] = true

	d := Collector{Timeouts: Timeouts{Other: 60 * time.Second}}.Reverse(page, now, p)
	require.Equal(t, []Key{orphan, dsrOrphan, moved}, d.ReverseOrphans)
	require.Equal(t, []Key{expired}, d.ReverseExpired)
	require.Equal(t, []Key{expiredFwd}, d.Forward)
	require.Equal(t, Counts{Scanned: 6, Expired: 1, Orphans: 3, LookupErrors: 1, Alive: ProtoCounts{TCP: 1, UDP: 1}}, d.Counts)
	require.NotContains(t, d.ReverseOrphans, live)
	require.NotContains(t, d.ReverseOrphans, failing)
}

// Configured lifetimes replace the defaults field by field; out-of-range
// ones are refused naming the field.
func TestTimeoutsDefaultsAndValidation(t *testing.T) {
	got := Timeouts{TCPClosing: 5 * time.Second}.WithDefaults()
	require.Equal(t, Timeouts{TCPClosing: 5 * time.Second, TCPNotReplied: 60 * time.Second, TCPEstablished: 21600 * time.Second, Other: 60 * time.Second}, got)
	require.NoError(t, Timeouts{}.Validate())
	require.NoError(t, DefaultTimeouts().Validate())
	for name, tt := range map[string]Timeouts{
		"TCPClosing":     {TCPClosing: -time.Second},
		"TCPNotReplied":  {TCPNotReplied: time.Millisecond},
		"TCPEstablished": {TCPEstablished: 400 * 24 * time.Hour},
		"Other":          {Other: -1},
	} {
		err := tt.Validate()
		require.ErrorIs(t, err, ErrInvalidConfig, name)
		require.ErrorContains(t, err, name)
	}
}

// Scanner configs out of range are refused naming the field, before any
// map is touched.
func TestScannerConfigIsChecked(t *testing.T) {
	for field, c := range map[string]Config{
		"Root":       {},
		"PerTick":    {Root: "/sys/fs/bpf/x", PerTick: 3},
		"TCPClosing": {Root: "/sys/fs/bpf/x", Timeouts: Timeouts{TCPClosing: -1}},
	} {
		_, err := NewScanner(c)
		require.ErrorIs(t, err, ErrInvalidConfig, field)
		require.ErrorContains(t, err, field)
	}
}

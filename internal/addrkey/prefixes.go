package addrkey

// Prefixes104 keeps the /104 prefixes of IPv6 addresses under 16-bit
// handles, counted: a handle serves every address of its prefix and is
// freed (and later reused) when its last user releases it, so the table
// never holds more prefixes than addresses in use. A mirror of IPv6
// backends keeps each address as a handle and its last 3 bytes (5 bytes
// instead of 17). Not safe for concurrent use: its owner's.
type Prefixes104 struct {
	handles map[prefix104]uint16
	uses    []prefixUse // by handle
	free    []uint16    // handles with no user
	max     int
}

type prefixUse struct {
	pre  prefix104
	refs uint32
}

// MaxPrefixes104 is how many prefixes a Prefixes104 holds at once: a
// full table costs about 400 KB, so that addresses spread over more
// prefixes (each in its own) cost little more than kept whole.
const MaxPrefixes104 = 8192

// NewPrefixes104 returns an empty table.
func NewPrefixes104() *Prefixes104 { return newPrefixes104(MaxPrefixes104) }

func newPrefixes104(max int) *Prefixes104 {
	return &Prefixes104{handles: map[prefix104]uint16{}, max: max}
}

// Acquire returns the handle of ip's prefix and ip's last 3 bytes, one
// more use of the handle. ok is false (and nothing is counted) when ip is
// not IPv6 or the table is full of other prefixes.
func (t *Prefixes104) Acquire(ip IP) (h uint16, low [3]byte, ok bool) {
	if ip.kind != 6 {
		return 0, low, false
	}
	low = [3]byte(ip.addr[13:])
	pre := prefix104(ip.addr[:13])
	if h, ok := t.handles[pre]; ok {
		t.uses[h].refs++
		return h, low, true
	}
	switch {
	case len(t.free) > 0:
		h = t.free[len(t.free)-1]
		t.free = t.free[:len(t.free)-1]
		t.uses[h] = prefixUse{pre, 1}
	case len(t.uses) < t.max:
		h = uint16(len(t.uses))
		t.uses = append(t.uses, prefixUse{pre, 1})
	default:
		return 0, low, false
	}
	t.handles[pre] = h
	return h, low, true
}

// Release gives back one use of h; its last frees it.
func (t *Prefixes104) Release(h uint16) {
	u := &t.uses[h]
	if u.refs--; u.refs == 0 {
		delete(t.handles, u.pre)
		t.free = append(t.free, h)
	}
}

// IP returns the address of handle h (in use) and last bytes low.
func (t *Prefixes104) IP(h uint16, low [3]byte) IP {
	ip := IP{kind: 6}
	copy(ip.addr[:13], t.uses[h].pre[:])
	copy(ip.addr[13:], low[:])
	return ip
}

// Len returns how many prefixes are in use.
func (t *Prefixes104) Len() int { return len(t.handles) }

package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sync"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
)

// cookieSize is what the iterator writes per destroyed socket: its cookie.
const cookieSize = 8

// term4Key and term6Key are the filter map keys of sockterm.c: a backend
// address and port and a service ID (0: any), in network order.
type term4Key struct {
	Address [4]byte
	Port    [2]byte
	Service [2]byte
}

type term6Key struct {
	Address [16]byte
	Port    [2]byte
	Service [2]byte
}

// UDPTarget names connected UDP sockets to destroy: those that reached
// Backend through a VIP of the service Service, or of any service if
// Service is 0.
type UDPTarget struct {
	Backend netip.AddrPort
	Service lb.ServiceID
}

// sockterm is the loaded termination object, shared by every caller of
// TerminateUDPSockets in the process. mu serializes the calls: they share
// the filter maps.
var sockterm struct {
	mu sync.Mutex
	// cur is the object loaded on the reverse maps pinned under cur.root,
	// nil before the first call or after an error left it doubtful.
	cur *socktermLoaded
	// unsupported is the error of a load the kernel cannot do; it is
	// returned from then on (the kernel does not change).
	unsupported error
}

type socktermLoaded struct {
	root       string
	rev4, rev6 ebpf.MapID
	objs       socktermObjects
	iter       *link.Iter
}

func (l *socktermLoaded) close() {
	if l.iter != nil {
		l.iter.Close()
	}
	l.objs.Close()
}

// TerminateUDPSockets destroys the connected UDP sockets (IPv4, IPv6 and
// dual-stack ones connected to an IPv4-mapped address) whose peer is one of
// backends and that reached it through a service VIP of the socket load
// balancer attached with the maps under root (maps.DefaultRoot if empty).
// A socket connected straight to a backend's address is left alone. It
// returns how many sockets it destroyed.
//
// The owner of a destroyed socket gets ECONNABORTED from its pending or
// next receive; the socket is disconnected (a send without an address then
// fails with EDESTADDRREQ), and connecting it again goes through the socket
// LB, which picks a backend still in service. Call it once a backend has
// left a service (or became terminating or quarantined) and the maps say
// so, or a reconnect may land on it again.
//
// It walks the UDP sockets of the network namespace of the calling thread
// (the agent's: the host's). Sockets in other namespaces are not visited.
//
// Without the socket LB's reverse maps pinned under root (the datapath is
// not attached) no socket can have reached a backend through it: it
// returns 0, nil. On a kernel without bpf_sock_destroy (before 6.5) it
// fails with ErrSockDestroyNotSupported. Bad input (an invalid address,
// port 0) fails before anything is done. Calls may run concurrently; they
// take turns.
func TerminateUDPSockets(root string, backends []netip.AddrPort) (int, error) {
	targets := make([]UDPTarget, len(backends))
	for i, b := range backends {
		targets[i] = UDPTarget{Backend: b}
	}
	n, err := terminateUDPSockets(root, "backends", targets)
	if err != nil {
		return n, fmt.Errorf("terminate udp sockets: %w", err)
	}
	return n, nil
}

// TerminateUDPSocketsOf is TerminateUDPSockets for the sockets that reached
// each target's backend through the given service's VIP: a backend that
// left one service keeps its clients of another. Errors name targets[i].
func TerminateUDPSocketsOf(root string, targets []UDPTarget) (int, error) {
	n, err := terminateUDPSockets(root, "targets", targets)
	if err != nil {
		return n, fmt.Errorf("terminate udp sockets: %w", err)
	}
	return n, nil
}

func terminateUDPSockets(root, field string, targets []UDPTarget) (int, error) {
	if root == "" {
		root = maps.DefaultRoot
	}
	keys4, keys6, err := termKeys(field, targets)
	if err != nil {
		return 0, err
	}
	if len(keys4)+len(keys6) == 0 {
		return 0, nil
	}

	sockterm.mu.Lock()
	defer sockterm.mu.Unlock()
	if sockterm.unsupported != nil {
		return 0, sockterm.unsupported
	}
	rev4, rev6, err := openReverseMaps(root)
	if err != nil {
		return 0, err
	}
	if rev4 == nil {
		return 0, nil // the datapath is not attached
	}
	defer rev4.Close()
	defer rev6.Close()
	l, err := socktermFor(root, rev4, rev6)
	if err != nil {
		return 0, err
	}

	// One run per chunk of at most the filter maps' capacity.
	max4 := int(l.objs.Sockterm4Backends.MaxEntries())
	max6 := int(l.objs.Sockterm6Backends.MaxEntries())
	total := 0
	for len(keys4) > 0 || len(keys6) > 0 {
		c4, c6 := keys4[:min(len(keys4), max4)], keys6[:min(len(keys6), max6)]
		keys4, keys6 = keys4[len(c4):], keys6[len(c6):]
		n, err := l.run(c4, c6)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// termKeys validates targets (field names them in errors) and turns them
// into filter keys, without duplicates; IPv4-mapped IPv6 addresses are IPv4
// backends.
func termKeys(field string, targets []UDPTarget) ([]term4Key, []term6Key, error) {
	var keys4 []term4Key
	var keys6 []term6Key
	seen := make(map[UDPTarget]bool, len(targets))
	for i, t := range targets {
		b := t.Backend
		a := b.Addr().Unmap()
		switch {
		case !a.IsValid():
			return nil, nil, fmt.Errorf("%s[%d]: address: missing or invalid", field, i)
		case a.Zone() != "":
			return nil, nil, fmt.Errorf("%s[%d]: address %s: zones are not supported", field, i, b.Addr())
		case b.Port() == 0:
			return nil, nil, fmt.Errorf("%s[%d] (%s): port: must be 1..65535", field, i, b)
		}
		t.Backend = netip.AddrPortFrom(a, b.Port())
		if seen[t] {
			continue
		}
		seen[t] = true
		var port, svc [2]byte
		binary.BigEndian.PutUint16(port[:], b.Port())
		binary.BigEndian.PutUint16(svc[:], uint16(t.Service))
		if a.Is4() {
			keys4 = append(keys4, term4Key{Address: a.As4(), Port: port, Service: svc})
		} else {
			keys6 = append(keys6, term6Key{Address: a.As16(), Port: port, Service: svc})
		}
	}
	return keys4, keys6, nil
}

// openReverseMaps opens the socket LB's reverse maps pinned under root; nil
// maps and no error when either is not pinned.
func openReverseMaps(root string) (*ebpf.Map, *ebpf.Map, error) {
	var out [2]*ebpf.Map
	for i, name := range []string{ReverseSK4Name, ReverseSK6Name} {
		path := filepath.Join(root, name)
		m, err := ebpf.LoadPinnedMap(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			if out[0] != nil {
				out[0].Close()
			}
			return nil, nil, nil
		}
		if err != nil {
			if out[0] != nil {
				out[0].Close()
			}
			return nil, nil, fmt.Errorf("open pinned map %s: %w", path, err)
		}
		out[i] = m
	}
	return out[0], out[1], nil
}

// kernelMapID returns m's kernel ID, 0 if the kernel does not say.
func kernelMapID(m *ebpf.Map) ebpf.MapID {
	info, err := m.Info()
	if err != nil {
		return 0
	}
	id, _ := info.ID()
	return id
}

// socktermFor returns the object loaded on rev4 and rev6: the cached one
// if it was loaded on these very maps (the same kernel objects: Attach
// after a Detach pins new ones), else a new one, which replaces it. The
// caller holds sockterm.mu.
func socktermFor(root string, rev4, rev6 *ebpf.Map) (*socktermLoaded, error) {
	id4, id6 := kernelMapID(rev4), kernelMapID(rev6)
	if c := sockterm.cur; c != nil && c.root == root && id4 != 0 && c.rev4 == id4 && c.rev6 == id6 {
		return c, nil
	}
	if sockterm.cur != nil {
		sockterm.cur.close()
		sockterm.cur = nil
	}
	l, err := loadTermination(root, rev4, rev6)
	if errors.Is(err, ErrSockDestroyNotSupported) {
		sockterm.unsupported = err
	}
	if err != nil {
		return nil, err
	}
	l.rev4, l.rev6 = id4, id6
	sockterm.cur = l
	return l, nil
}

func loadTermination(root string, rev4, rev6 *ebpf.Map) (*socktermLoaded, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock limit: %w (run as root)", err)
	}
	spec, err := loadSockterm()
	if err != nil {
		return nil, err
	}
	repl := map[string]*ebpf.Map{socktermMapLb4ReverseSk: rev4, socktermMapLb6ReverseSk: rev6}
	for name, m := range repl {
		ms := spec.Maps[name]
		ms.MaxEntries = m.MaxEntries() // the datapath's choice
		if err := ms.Compatible(m); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrIncompatible, filepath.Join(root, name), err)
		}
	}
	l := &socktermLoaded{root: root}
	err = spec.LoadAndAssign(&l.objs, &ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		return nil, loadError(err)
	}
	l.iter, err = link.AttachIter(link.IterOptions{Program: l.objs.SocktermUdp})
	if err != nil {
		l.close()
		if errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("%w: attach iterator: %v", ErrSockDestroyNotSupported, err)
		}
		return nil, fmt.Errorf("attach iterator %s: %w", socktermProgSocktermUdp, err)
	}
	return l, nil
}

// loadError explains a failure to load the termination object.
func loadError(err error) error {
	if errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("%w: load %s: %v", ErrSockDestroyNotSupported, socktermProgSocktermUdp, err)
	}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("load %s: %w\nverifier log:\n%+v", socktermProgSocktermUdp, err, ve)
	}
	return fmt.Errorf("load %s: %w", socktermProgSocktermUdp, err)
}

// run fills the filter maps with keys4 and keys6, walks the sockets once
// and empties the maps again. It returns how many sockets were destroyed.
// If the maps cannot be emptied, the cached object is dropped so that a
// stale filter never serves another call.
func (l *socktermLoaded) run(keys4 []term4Key, keys6 []term6Key) (n int, err error) {
	one := uint8(1)
	defer func() {
		var errs []error
		for _, k := range keys4 {
			if derr := l.objs.Sockterm4Backends.Delete(k); derr != nil && !errors.Is(derr, ebpf.ErrKeyNotExist) {
				errs = append(errs, derr)
			}
		}
		for _, k := range keys6 {
			if derr := l.objs.Sockterm6Backends.Delete(k); derr != nil && !errors.Is(derr, ebpf.ErrKeyNotExist) {
				errs = append(errs, derr)
			}
		}
		if len(errs) > 0 {
			l.close()
			sockterm.cur = nil
			err = errors.Join(err, fmt.Errorf("empty the filter maps: %w", errors.Join(errs...)))
		}
	}()
	for _, k := range keys4 {
		if err := l.objs.Sockterm4Backends.Put(k, one); err != nil {
			return 0, fmt.Errorf("fill filter map %s: %w", socktermMapSockterm4Backends, err)
		}
	}
	for _, k := range keys6 {
		if err := l.objs.Sockterm6Backends.Put(k, one); err != nil {
			return 0, fmt.Errorf("fill filter map %s: %w", socktermMapSockterm6Backends, err)
		}
	}
	rd, err := l.iter.Open()
	if err != nil {
		return 0, fmt.Errorf("open iterator: %w", err)
	}
	defer rd.Close()
	// Each read runs the program on the next batch of sockets; the output
	// is one cookie per destroyed socket.
	out, err := io.ReadAll(rd)
	n = len(out) / cookieSize
	if err != nil {
		return n, fmt.Errorf("read iterator: %w", err)
	}
	if len(out)%cookieSize != 0 {
		return n, fmt.Errorf("read iterator: %d bytes, not a whole number of %d-byte cookies", len(out), cookieSize)
	}
	return n, nil
}

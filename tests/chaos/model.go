package chaos

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	lb "github.com/actorlb/actorlb/loadbalancer"
)

// Model is the pure reference: frontend -> backends with their states.
// IDs are not modelled exactly (a create may take any free ID) but must
// not change once acknowledged.
type Model struct {
	Services map[string]ModelService
}

// ModelService is one service in the model.
type ModelService struct {
	ID       lb.ServiceID
	Backends map[string]lb.BackendState
}

// NewModel returns an empty model.
func NewModel() *Model { return &Model{Services: map[string]ModelService{}} }

// State returns the state of a backend used by any service of the model.
func (m *Model) State(b string) (lb.BackendState, bool) {
	for _, s := range m.Services {
		if st, ok := s.Backends[b]; ok {
			return st, true
		}
	}
	return 0, false
}

// Set records an acknowledged version of fe; its backends' states apply
// to every service using them (one state per backend).
func (m *Model) Set(fe string, s ModelService) {
	m.Services[fe] = s
	for _, o := range m.Services {
		for b := range o.Backends {
			if st, ok := s.Backends[b]; ok {
				o.Backends[b] = st
			}
		}
	}
}

// FromService renders svc the way the model holds it.
func FromService(svc *lb.Service) ModelService {
	m := ModelService{ID: svc.Frontend.ID, Backends: map[string]lb.BackendState{}}
	for _, b := range svc.Backends {
		m.Backends[b.String()] = b.State
	}
	return m
}

// Equal reports whether two model services hold the same backends and
// states (and the same ID when both are set).
func (m ModelService) Equal(o ModelService) bool {
	if m.ID != 0 && o.ID != 0 && m.ID != o.ID {
		return false
	}
	return maps.Equal(m.Backends, o.Backends)
}

func (m ModelService) String() string {
	keys := slices.Sorted(maps.Keys(m.Backends))
	var b strings.Builder
	fmt.Fprintf(&b, "id=%d", m.ID)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s:%s", k, m.Backends[k])
	}
	return b.String()
}

// Diff lists how the services the engine reports differ from the model.
func (m *Model) Diff(got []*lb.Service) []string {
	var out []string
	seen := map[string]bool{}
	for _, svc := range got {
		fe := svc.Frontend.L3n4Addr.String()
		seen[fe] = true
		want, ok := m.Services[fe]
		if !ok {
			out = append(out, fmt.Sprintf("%s: in the engine, not in the model", fe))
			continue
		}
		if g := FromService(svc); !want.Equal(g) {
			out = append(out, fmt.Sprintf("%s: engine %s, model %s", fe, g, want))
		}
	}
	for fe := range m.Services {
		if !seen[fe] {
			out = append(out, fmt.Sprintf("%s: in the model, not in the engine", fe))
		}
	}
	slices.Sort(out)
	return out
}

package main

import (
	"net/netip"

	"github.com/actorlb/actorlb/k8s/source"
)

// newKubeSource starts nothing: it makes the source the bench runs, for a
// node named bench-node without node addresses (ClusterIP services only;
// no Node is watched).
func newKubeSource(cfg kubeSourceConfig) (kubeSource, error) {
	s, err := source.New(source.Config{
		Client:        cfg.Client,
		NodeName:      "bench-node",
		NodeAddresses: []netip.Addr{},
		Target:        cfg.Target,
		Logger:        cfg.Logger,
		Registerer:    cfg.Registerer,
	})
	if err != nil {
		return nil, err
	}
	return &sourceAdapter{Source: s, reg: cfg}, nil
}

type sourceAdapter struct {
	*source.Source
	reg kubeSourceConfig
}

func (a *sourceAdapter) progress() kubeProgress {
	st := a.Status()
	return kubeProgress{
		Synced: st.Synced, Services: st.Services, Pending: st.Pending,
		Conflicts: len(st.Conflicts), LastApplyError: st.LastApplyError,
		ProgrammingSeconds: programmingHistogram(a.reg.Registerer),
	}
}

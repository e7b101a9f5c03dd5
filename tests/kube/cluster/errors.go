package cluster

import "errors"

var (
	// ErrNoBinaries means the etcd and kube-apiserver test binaries are
	// not built: run `make kube-tools`.
	ErrNoBinaries = errors.New("kube test binaries not built (run `make kube-tools`)")

	// ErrClosed is returned by the methods of a closed Cluster.
	ErrClosed = errors.New("cluster closed")

	// ErrAPIServerRunning is returned by StartAPIServer while the
	// apiserver is running, and ErrAPIServerStopped by StopAPIServer and
	// KillAPIServer while it is not.
	ErrAPIServerRunning = errors.New("apiserver already running")
	ErrAPIServerStopped = errors.New("apiserver not running")
)

//go:build !kubesource

package main

// Until k8s/source is on main, the bench is built with -tags kubesource
// where it is; without it the Kubernetes scenarios are skipped.
func newKubeSource(kubeSourceConfig) (kubeSource, error) {
	return nil, errNoKubeSource
}

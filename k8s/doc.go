// Package k8s is the root of actorlb's Kubernetes mode: the node-side
// consumer of the cluster's Services and EndpointSlices, in the role of
// kube-proxy. Its sub-packages split the pure translation (translate) from
// the client-go I/O that feeds it.
package k8s

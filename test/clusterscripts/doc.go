// Package clusterscripts tests the local cluster's shell functions
// (hack/cluster-env.sh, hack/cluster-lib.sh) without a cluster: they run
// in bash against a temporary state directory.
package clusterscripts

// Package testenv starts a real kube-apiserver and etcd (controller-runtime's
// envtest) with toolgate's CRDs installed, for integration tests.
//
// The binaries are the ones hack/build-k8s.sh builds from source into a
// per-user cache; KUBEBUILDER_ASSETS overrides the location. A missing binary
// fails the test run with the command that builds it: an integration test is
// never silently skipped.
package testenv

// Package quickstart runs docs/quickstart.md on the local cluster (build
// tag e2e; `make test-quickstart`): every ```sh block of the page, in
// order and as written, so the page cannot go stale. Between the page's
// install and its clean-up it upgrades the release with a changed value
// (the call retention) and checks the rollout of its two replicas; after the clean-up it checks that
// nothing of toolgate's is left in the cluster.
package quickstart

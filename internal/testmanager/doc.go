// Package testmanager runs toolgate's controllers in process, against
// envtest, for the suites of packages outside internal/controller (the MCP
// gateway, the agent client) and the hack tools that measure the manager
// (hack/throughput, hack/gatewaybench): composed by internal/compose, as
// cmd/manager composes them, with the Process sandbox (tools run as local
// processes).
package testmanager

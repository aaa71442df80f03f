// Package testmanager runs toolgate's controllers for the envtest suites of
// packages outside internal/controller (the MCP gateway, the agent client):
// composed as cmd/manager composes them, with the APIServer approval
// provider and the Process sandbox (tools run as local processes).
package testmanager

// Package cli implements the kubectl plugin, `kubectl toolgate`, on
// k8s.io/cli-runtime: the standard kubectl flags (ConfigFlags: --kubeconfig,
// --context, -n, --as, --as-group, --request-timeout, ...) and output flags
// (PrintFlags: -o json|yaml|name|jsonpath..., plus wide for the tables).
//
// Commands: approve and deny an ApprovalRequest as the current user (the
// API server's admission policy decides who may), pending lists the
// requests waiting for a person, trace prints a call's stage boundaries and
// the first that diverged, transcript prints a session's committed results
// in model order, and profile prints a ToolProfile as resolved.
package cli

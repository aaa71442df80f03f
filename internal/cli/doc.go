// Package cli implements the kubectl plugin (`kubectl toolgate`): approve
// or deny a call's ApprovalRequest as the current user, trace a call's
// stages to the first boundary that diverged, and print a session's
// committed transcript in model order.
package cli

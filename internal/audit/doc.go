// Package audit is toolgate's audit trail: one JSON record per approval
// decision and per settled call, written as a line to a sink that outlives
// the objects (a ToolCall and its ApprovalRequest are deleted with their
// session or by retention; the record is not).
//
// A record names who asked, which tool, the arguments by digest and
// redacted preview (never their text), every policy verdict, who approved
// or denied and when, the outcome and code, the result by digest, and the
// pod and runtime it ran in. Digests are MACs under a key derived from
// the manager's: the arguments digest equals the ApprovalRequest's
// toolgate.dev/arguments-digest annotation, so a record and a request are
// matched without either holding the arguments.
//
// Records are written at least once: a manager that restarts between its
// write of the call's result and the record may write it again. Each
// record has a stable id (the call's UID and what the record is about),
// for consumers to keep one. docs/operations.md documents every field.
package audit

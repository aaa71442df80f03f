// Package notify tells people that an approval question is waiting, and
// how it ended: when toolgate opens an ApprovalRequest, and when it is
// approved, denied, expires or is withdrawn, an event goes to the sinks
// the install names (a generic webhook receiving CloudEvents JSON, or
// Slack- and Teams-compatible incoming webhooks), chosen per profile by
// name (ToolProfile approval.notify) or for every profile (default).
//
// Sinks are the install's, never a profile's: a URL a tenant could set
// would make the manager a client of any address the tenant chose. The
// configuration is a file (a Secret's key mounted into the manager: a
// webhook URL is a credential).
//
// Delivery never blocks a call: events are queued per sink and namespace
// (bounded; an event that finds its namespace's queue full is dropped and
// counted) and sent by the sink's own worker, the namespaces in turn and
// each one's events in order, so one sink down delays no other, each
// retried with backoff on a network error, 429 or 5xx, and counted by sink
// and result. A notification carries the redacted preview an approver
// reads, never the arguments.
package notify

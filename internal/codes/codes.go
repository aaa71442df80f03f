package codes

// Error codes. The strings are part of the API: logs, metrics, ToolCall
// status and the model all see them. Never change one.
const (
	PolicyDenied        = "policy_denied"        // a pre-execute listener denied
	ApprovalRejected    = "approval_rejected"    // a person denied the call
	ApprovalUnavailable = "approval_unavailable" // no approver, or it cannot answer: fail closed
	ApprovalExpired     = "approval_expired"     // nobody answered before the deadline
	GuardDenied         = "guard_denied"         // a monotonic guard denied
	SandboxDenied       = "sandbox_denied"       // the sandbox refused an operation (e.g. a path escaping the workspace)

	Cancelled         = "cancelled"          // the caller cancelled
	ApprovalCancelled = "approval_cancelled" // the question was withdrawn

	Timeout = "timeout" // the body exceeded its timeout

	InvalidArguments     = "invalid_arguments"     // not lossless JSON, or fails the parameters schema
	UnknownTool          = "unknown_tool"          // no visible tool of that name
	WrapperFailed        = "wrapper_failed"        // an execute wrapper failed or panicked
	ToolError            = "tool_error"            // the body returned an error
	ToolPanic            = "tool_panic"            // the body panicked
	Interrupted          = "interrupted"           // a non-idempotent attempt was interrupted; it is never re-run
	SandboxUnavailable   = "sandbox_unavailable"   // the sandbox could not run the tool (image missing, pod refused)
	SchemaChanged        = "schema_changed"        // the MCP server no longer lists the tool with the schemas its profile pinned; the tool was not called
	SandboxOOMKilled     = "sandbox_oom_killed"    // the tool exceeded its memory limit
	SandboxEvicted       = "sandbox_evicted"       // the cluster evicted the tool's pod (node pressure, the eviction API, preemption, a lost node)
	SandboxNotReady      = "sandbox_not_ready"     // the tool's sandbox was not ready within its start bound; the body never started
	SandboxLost          = "sandbox_lost"          // the tool's pod disappeared (deleted by someone else) or its result cannot be verified
	ManagerUnavailable   = "manager_unavailable"   // the tool's pod was ready in time, but no manager handed it the call while it could still run the body; the body never started
	OutputInvalid        = "output_invalid"        // the value is not lossless JSON or fails the output schema
	RenderFailed         = "render_failed"         // rendering the value failed
	PostBlocked          = "post_blocked"          // a post-execute listener blocked the result
	PostFailed           = "post_failed"           // a post-execute listener failed, or replaced the value badly
	NormalizationFailed  = "normalization_failed"  // the finalizer panicked
	Internal             = "internal"              // a pipeline invariant broke; reported, never hidden
	ProfileUnavailable   = "profile_unavailable"   // the call's profile is missing or not Ready
	WorkspaceUnavailable = "workspace_unavailable" // the session's workspace claim cannot be mounted (its session says why)
	SessionGone          = "session_gone"          // the call's session does not exist
	TurnClosed           = "turn_closed"           // the call arrived after a call later in model order had started
	DuplicateCall        = "duplicate_call"        // another call of the session has the same (turn, index) or callID; it keeps the place
	TurnSizeMismatch     = "turn_size_mismatch"    // the call's turnSize disagrees with its turn's
	OutputTooLarge       = "output_too_large"      // the value is larger than a result can hold
	ResultRejected       = "result_rejected"       // the API server refused to store the result (size or validation); the call failed instead
	NotSessionOwner      = "not_session_owner"     // the call's requester is not the session's owner
	InvalidParent        = "invalid_parent"        // a nested call's parent is not an executing call of the same session
)

package pipeline

// Code is a stable, documented error code. Codes are part of the API: logs,
// metrics, ToolCall status and the model all see them, never free text.
type Code string

// Error codes, grouped by the outcome they settle as.
const (
	// Denied.
	CodePolicyDenied        Code = "policy_denied"        // a pre-execute listener denied
	CodeApprovalRejected    Code = "approval_rejected"    // a person denied the call
	CodeApprovalUnavailable Code = "approval_unavailable" // no approver, or it cannot answer: fail closed
	CodeApprovalExpired     Code = "approval_expired"     // nobody answered before the deadline
	CodeGuardDenied         Code = "guard_denied"         // a monotonic guard denied
	CodeSandboxDenied       Code = "sandbox_denied"       // the sandbox refused an operation (e.g. a path escaping the workspace)

	// Cancelled.
	CodeCancelled         Code = "cancelled"          // the caller cancelled
	CodeApprovalCancelled Code = "approval_cancelled" // the question was withdrawn

	// TimedOut.
	CodeTimeout Code = "timeout" // the body exceeded its timeout

	// Failed.
	CodeInvalidArguments    Code = "invalid_arguments"    // not lossless JSON, or fails the parameters schema
	CodeUnknownTool         Code = "unknown_tool"         // no visible tool of that name
	CodeWrapperFailed       Code = "wrapper_failed"       // an execute wrapper failed or panicked
	CodeToolError           Code = "tool_error"           // the body returned an error
	CodeToolPanic           Code = "tool_panic"           // the body panicked
	CodeInterrupted         Code = "interrupted"          // a non-idempotent attempt was interrupted; it is never re-run
	CodeSandboxUnavailable  Code = "sandbox_unavailable"  // the sandbox could not run the tool (image missing, pod refused)
	CodeSandboxOOMKilled    Code = "sandbox_oom_killed"   // the tool exceeded its memory limit
	CodeSandboxEvicted      Code = "sandbox_evicted"      // the node evicted the tool's pod
	CodeSandboxLost         Code = "sandbox_lost"         // the tool's pod disappeared (deleted by someone else) or its result cannot be verified
	CodeOutputInvalid       Code = "output_invalid"       // the value is not lossless JSON or fails the output schema
	CodeRenderFailed        Code = "render_failed"        // rendering the value failed
	CodePostBlocked         Code = "post_blocked"         // a post-execute listener blocked the result
	CodePostFailed          Code = "post_failed"          // a post-execute listener failed, or replaced the value badly
	CodeNormalizationFailed Code = "normalization_failed" // the finalizer panicked
	CodeInternal            Code = "internal"             // a pipeline invariant broke; reported, never hidden
	CodeProfileUnavailable  Code = "profile_unavailable"  // the call's profile is missing or not Ready
	CodeSessionGone         Code = "session_gone"         // the call's session does not exist
	CodeTurnClosed          Code = "turn_closed"          // the call arrived after a call later in model order had started
)

// outcomeOf maps a code to the outcome it settles as.
func outcomeOf(c Code) Outcome {
	switch c {
	case "":
		return Succeeded
	case CodePolicyDenied, CodeApprovalRejected, CodeApprovalUnavailable, CodeApprovalExpired, CodeGuardDenied, CodeSandboxDenied:
		return Denied
	case CodeCancelled, CodeApprovalCancelled:
		return Cancelled
	case CodeTimeout:
		return TimedOut
	default:
		return Failed
	}
}

// Failure is an error carrying a stable code. Bodies and wrappers may return
// one to choose the code (for example a sandbox escape is a tool_error with a
// specific message, a timeout detected by a provider is CodeTimeout).
type Failure struct {
	Code    Code   `json:"code"`
	Message string `json:"message,omitempty"`
}

func (f *Failure) Error() string { return string(f.Code) + ": " + f.Message }

// Fail returns a *Failure.
func Fail(code Code, message string) error { return &Failure{Code: code, Message: message} }

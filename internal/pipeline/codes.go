package pipeline

import "github.com/toolgate/toolgate/internal/codes"

// Code is a stable, documented error code. Codes are part of the API: logs,
// metrics, ToolCall status and the model all see them, never free text.
type Code string

// Error codes, grouped by the outcome they settle as. The strings (and what
// each means) are defined once, in internal/codes.
const (
	// Denied.
	CodePolicyDenied        Code = codes.PolicyDenied
	CodeApprovalRejected    Code = codes.ApprovalRejected
	CodeApprovalUnavailable Code = codes.ApprovalUnavailable
	CodeApprovalExpired     Code = codes.ApprovalExpired
	CodeGuardDenied         Code = codes.GuardDenied
	CodeSandboxDenied       Code = codes.SandboxDenied

	// Cancelled.
	CodeCancelled         Code = codes.Cancelled
	CodeApprovalCancelled Code = codes.ApprovalCancelled

	// TimedOut.
	CodeTimeout Code = codes.Timeout

	// Failed.
	CodeInvalidArguments     Code = codes.InvalidArguments
	CodeUnknownTool          Code = codes.UnknownTool
	CodeWrapperFailed        Code = codes.WrapperFailed
	CodeToolError            Code = codes.ToolError
	CodeToolPanic            Code = codes.ToolPanic
	CodeInterrupted          Code = codes.Interrupted
	CodeSandboxUnavailable   Code = codes.SandboxUnavailable
	CodeSchemaChanged        Code = codes.SchemaChanged
	CodeSandboxOOMKilled     Code = codes.SandboxOOMKilled
	CodeSandboxEvicted       Code = codes.SandboxEvicted
	CodeSandboxNotReady      Code = codes.SandboxNotReady
	CodeSandboxLost          Code = codes.SandboxLost
	CodeManagerUnavailable   Code = codes.ManagerUnavailable
	CodeOutputInvalid        Code = codes.OutputInvalid
	CodeRenderFailed         Code = codes.RenderFailed
	CodePostBlocked          Code = codes.PostBlocked
	CodePostFailed           Code = codes.PostFailed
	CodeNormalizationFailed  Code = codes.NormalizationFailed
	CodeInternal             Code = codes.Internal
	CodeProfileUnavailable   Code = codes.ProfileUnavailable
	CodeWorkspaceUnavailable Code = codes.WorkspaceUnavailable
	CodeSessionGone          Code = codes.SessionGone
	CodeTurnClosed           Code = codes.TurnClosed
	CodeDuplicateCall        Code = codes.DuplicateCall
	CodeTurnSizeMismatch     Code = codes.TurnSizeMismatch
	CodeInvalidParent        Code = codes.InvalidParent
	CodeNotSessionOwner      Code = codes.NotSessionOwner
	CodeOutputTooLarge       Code = codes.OutputTooLarge
	CodeResultRejected       Code = codes.ResultRejected
)

// OutcomeOf maps a code to the outcome it settles as.
func OutcomeOf(c Code) Outcome {
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
// one to choose the code (for example a path escaping the workspace is
// sandbox_denied, a timeout detected by a provider is CodeTimeout).
type Failure struct {
	Code    Code   `json:"code"`
	Message string `json:"message,omitempty"`
}

func (f *Failure) Error() string { return string(f.Code) + ": " + f.Message }

// Fail returns a *Failure.
func Fail(code Code, message string) error { return &Failure{Code: code, Message: message} }

package sandbox

import (
	"github.com/toolgate/toolgate/internal/codes"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/runner"
	"github.com/toolgate/toolgate/internal/textutil"
)

// runnerCodes are the codes a runner reports (its own, and the built-ins'):
// a runner may be the tool image's own (container.runnerPath), so any other
// is the tool's failure.
var runnerCodes = map[string]bool{
	codes.Timeout: true, codes.ToolError: true, codes.SandboxDenied: true, codes.SandboxUnavailable: true,
	codes.SandboxLost: true, codes.InvalidArguments: true, codes.Cancelled: true, codes.SchemaChanged: true,
}

// maxRunnerMessage bounds a runner's failure message, as a result's
// message is bounded.
const maxRunnerMessage = pipeline.MaxMessageBytes

// Outcome turns a runner frame into the contract's answer: a built-in's
// stable code or a runner failure becomes a pipeline failure with that code
// and message; anything else is the tool's result. It lives here, not in the
// runner, so that the in-pod binary links no pipeline.
func Outcome(h runner.Header, stdout, stderr []byte) (Result, error) {
	if h.Code != "" {
		code, msg := pipeline.Code(h.Code), h.Error
		if !runnerCodes[h.Code] {
			code, msg = pipeline.CodeToolError, "the tool's runner reported a code toolgate does not know: "+msg
		}
		return Result{}, pipeline.Fail(code, textutil.Truncate(textutil.Text(msg), maxRunnerMessage))
	}
	return Result{Stdout: string(stdout), Stderr: string(stderr), ExitCode: h.ExitCode, Truncated: h.Truncated, Contexts: h.Contexts}, nil
}

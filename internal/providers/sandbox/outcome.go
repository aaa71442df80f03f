package sandbox

import (
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/runner"
)

// Outcome turns a runner frame into the contract's answer: a built-in's
// stable code or a runner failure becomes a pipeline failure with that code
// and message; anything else is the tool's result. It lives here, not in the
// runner, so that the in-pod binary links no pipeline.
func Outcome(h runner.Header, stdout, stderr []byte) (Result, error) {
	if h.Code != "" {
		return Result{}, pipeline.Fail(pipeline.Code(h.Code), h.Error)
	}
	return Result{Stdout: string(stdout), Stderr: string(stderr), ExitCode: h.ExitCode, Truncated: h.Truncated, Contexts: h.Contexts}, nil
}

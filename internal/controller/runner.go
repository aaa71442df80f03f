package controller

import (
	"context"
	"errors"
	"fmt"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/textutil"
)

// callRunner is the pipeline.Runner of one call: the sandbox provider its
// profile selects and the job describing the call. The ToolCall controller
// gives each call's pipeline its own, so the hand-off is an argument, not
// something carried in a context.
type callRunner struct {
	provider sandbox.Provider // nil when the profile's provider is not mounted
	job      sandbox.Job
}

var _ pipeline.Runner = callRunner{}

// Run hands one attempt to the sandbox provider and turns its answer into a
// pipeline answer.
func (r callRunner) Run(ctx context.Context, spec any, args pipeline.Arguments, exec *pipeline.Exec) (string, error) {
	tool, ok := spec.(*toolgatev1alpha1.ToolDefinition)
	if !ok {
		return "", pipeline.Fail(pipeline.CodeInternal, fmt.Sprintf("a body declared as %T cannot run in a sandbox", spec))
	}
	if r.provider == nil {
		return "", pipeline.Fail(pipeline.CodeSandboxUnavailable, "the profile's sandbox provider is not mounted in this manager")
	}
	job := r.job
	job.Tool = tool
	job.Arguments = args.JSON()
	job.Attempt = exec.Attempt
	job.Key = sandbox.Key(job.OwnerUID, exec.Attempt)
	job.Resumed = exec.Resumed
	job.Dispatched = exec.StartedAt
	res, err := r.provider.Run(ctx, job)
	switch {
	case errors.Is(err, sandbox.ErrPending):
		return "", pipeline.Pending
	case errors.Is(err, sandbox.ErrLost):
		return "", pipeline.ErrAttemptLost
	case err != nil:
		return "", err
	case res.ExitCode != 0:
		return "", pipeline.Fail(pipeline.CodeToolError, fmt.Sprintf("exit code %d: %s", res.ExitCode, textutil.Tail(res.Stderr, 512)))
	}
	exec.Truncated = res.Truncated
	// A tool's deferred contexts precede decision contexts, and reach the
	// model only after its turn commits (the pipeline's rule).
	for _, m := range res.Contexts {
		exec.DeferContext(pipeline.Context{Message: m})
	}
	return res.Stdout, nil
}

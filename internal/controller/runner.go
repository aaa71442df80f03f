package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/profile"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
)

// jobContext is what the ToolCall controller knows about the attempt that
// the compiled tool body (which sees only pipeline types) needs.
type jobContext struct {
	provider sandbox.Provider
	job      sandbox.Job
}

type jobKey struct{}

func withJob(ctx context.Context, j jobContext) context.Context {
	return context.WithValue(ctx, jobKey{}, j)
}

// sandboxRunner is the tool body of every compiled profile: it hands the
// attempt to the sandbox provider the profile selects and turns the
// provider's answer into a pipeline answer.
func sandboxRunner(ctx context.Context, tool *toolgatev1alpha1.ToolDefinition, args pipeline.Arguments, exec *pipeline.Exec) (string, error) {
	j, ok := ctx.Value(jobKey{}).(jobContext)
	if !ok || j.provider == nil {
		return "", pipeline.Fail(pipeline.CodeToolError, "no sandbox provider is available for this call")
	}
	job := j.job
	job.Tool = tool
	job.Arguments = args.JSON()
	job.Attempt = exec.Attempt
	job.Key = sandbox.Key(job.OwnerUID, exec.Attempt)
	job.Resumed = exec.Resumed
	res, err := j.provider.Run(ctx, job)
	switch {
	case errors.Is(err, sandbox.ErrPending):
		return "", pipeline.Pending
	case errors.Is(err, sandbox.ErrLost):
		return "", pipeline.ErrAttemptLost
	case err != nil:
		return "", err
	case res.ExitCode != 0:
		return "", pipeline.Fail(pipeline.CodeToolError, fmt.Sprintf("exit code %d: %s", res.ExitCode, tail(res.Stderr, 512)))
	}
	exec.Truncated = res.Truncated
	return res.Stdout, nil
}

var _ profile.Runner = sandboxRunner

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

package controller

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

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
	tools    []toolgatev1alpha1.ToolDefinition // the profile's
	// recorded is where the call's durable status says its attempt runs.
	recorded func() string
	// taken names the sandboxes the session's other unsettled calls'
	// durable records name (sandbox.Job's Taken).
	taken func(ctx context.Context) []string
}

// where names the sandbox the attempt runs in, as its provider knows it
// ("" when it does not say).
func (r callRunner) where(uid types.UID, attempt int) string {
	if l, ok := r.provider.(sandbox.Locator); ok {
		return l.Where(sandbox.Key(uid, attempt))
	}
	return ""
}

// record tells the provider that the call's status now durably names
// where its attempt runs (sandbox.Recorder).
func (r callRunner) record(uid types.UID, attempt int, where string) {
	if rec, ok := r.provider.(sandbox.Recorder); ok && where != "" && attempt > 0 {
		rec.Recorded(sandbox.Key(uid, attempt), where)
	}
}

// prepare gets the sandbox of the attempt just dispatched ready before its
// boundary is written, when the provider can (sandbox.Preparer); a failure
// only leaves the work to Run. It reports whether it asked the provider.
func (r callRunner) prepare(ctx context.Context, st *pipeline.State) bool {
	p, ok := r.provider.(sandbox.Preparer)
	if !ok {
		return false
	}
	for i := range r.tools {
		if r.tools[i].Name != st.Request.Tool {
			continue
		}
		job := r.job
		job.Tool = &r.tools[i]
		job.Attempt = st.Attempt
		job.Key = sandbox.Key(job.OwnerUID, st.Attempt)
		job.Dispatched = st.AttemptStartedAt
		if r.taken != nil {
			job.Taken = r.taken(ctx)
		}
		if err := p.Prepare(ctx, job); err != nil {
			log.FromContext(ctx).Info("sandbox not prepared ahead of dispatch", "call", job.Owner.Name, "attempt", st.Attempt, "reason", err.Error())
		}
		return true
	}
	return false
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
	if r.recorded != nil {
		job.Records, job.Recorded = true, r.recorded()
	}
	if r.taken != nil {
		job.Taken = r.taken(ctx)
	}
	res, err := r.provider.Run(ctx, job)
	if l, ok := r.provider.(sandbox.Locator); ok {
		exec.Sandbox = l.Where(job.Key)
	}
	switch {
	case errors.Is(err, sandbox.ErrPending):
		return "", pipeline.Pending
	case errors.Is(err, sandbox.ErrLost):
		return "", pipeline.ErrAttemptLost
	case err != nil:
		return "", err
	case res.ExitCode != 0:
		return "", pipeline.Fail(pipeline.CodeToolError, exitMessage(tool, res))
	}
	exec.Truncated = res.Truncated
	// A tool's deferred contexts precede decision contexts, and reach the
	// model only after its turn commits (the pipeline's rule).
	for _, m := range res.Contexts {
		exec.DeferContext(pipeline.Context{Message: m})
	}
	return res.Stdout, nil
}

// exitMessage is the message of a body that exited non-zero. Its stderr is
// the tool's output, which no post-execute rule passes on a failure: only
// its size is told, unless the tool declares its stderr safe to show
// (output.failureDetail StderrTail).
func exitMessage(tool *toolgatev1alpha1.ToolDefinition, res sandbox.Result) string {
	switch {
	case tool.Output.FailureDetail == toolgatev1alpha1.FailureDetailStderrTail:
		return fmt.Sprintf("exit code %d: %s", res.ExitCode, textutil.Tail(res.Stderr, 512))
	case res.Stderr == "":
		return fmt.Sprintf("exit code %d", res.ExitCode)
	}
	return fmt.Sprintf("exit code %d (%d bytes of stderr withheld: the tool's output.failureDetail is Withheld)", res.ExitCode, len(res.Stderr))
}

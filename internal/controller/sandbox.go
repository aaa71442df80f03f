package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/runner"
	"github.com/toolgate/toolgate/internal/textutil"
)

// The sandbox seam as the controllers use it: every call of a sandbox
// provider's methods from this package is in this file
// (TestProvidersAreAskedInOneFile). The call's runner (callRunner) does
// a call's work: run an attempt, prepare its sandbox ahead of its
// boundary, and, told what the API server now holds of the call
// (durable), hand the recorded sandbox its body or end a settled call's
// attempts; releaseCall stops a call's work wherever it runs, for a call
// settled without its pipeline; the profile checks ask what a provider
// enforces, and listServer lists a profile's MCP server (discovery).

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
	// durable records name (sandbox.Record's Taken).
	taken func(ctx context.Context) []string
	// prepared is told the attempt whose sandbox Prepare asked for.
	prepared func(attempt int)
}

var (
	_ pipeline.Runner   = callRunner{}
	_ pipeline.Preparer = callRunner{}
)

// Prepare gets the sandbox of the attempt just dispatched ready before
// its boundary is written (pipeline.Preparer), when the provider can
// (sandbox.Preparer; a failure only leaves the work to Run), and names
// where it is for the boundary to record ("" when the provider does not
// say). The boundary then names the attempt's sandbox, never the previous
// attempt's: its body is handed only to a sandbox the status names.
func (r callRunner) Prepare(ctx context.Context, req pipeline.Request, attempt int, dispatched time.Time) string {
	p, ok := r.provider.(sandbox.Preparer)
	if !ok {
		return ""
	}
	key := sandbox.Key(r.job.OwnerUID, attempt)
	for i := range r.tools {
		if r.tools[i].Name != req.Tool {
			continue
		}
		job := r.job
		job.Tool = &r.tools[i]
		job.Attempt = attempt
		job.Key = key
		job.Dispatched = dispatched
		// Before its boundary the attempt has no record of its own yet:
		// only the sandboxes others' records name.
		job.Record = &sandbox.Record{Taken: r.takenNow(ctx)}
		if err := p.Prepare(ctx, job); err != nil {
			log.FromContext(ctx).Info("sandbox not prepared ahead of dispatch", "call", job.Owner.Name, "attempt", attempt, "reason", err.Error())
		}
		if r.prepared != nil {
			r.prepared(attempt)
		}
		break
	}
	return p.Where(key)
}

// record is the call's durable record of its sandboxes (sandbox.Record), nil
// when this runner was given none.
func (r callRunner) record(ctx context.Context) *sandbox.Record {
	if r.recorded == nil {
		return nil
	}
	return &sandbox.Record{Where: r.recorded(), Taken: r.takenNow(ctx)}
}

// takenNow names the sandboxes the session's other unsettled calls'
// records name (nil when this runner was given no way to know).
func (r callRunner) takenNow(ctx context.Context) []string {
	if r.taken == nil {
		return nil
	}
	return r.taken(ctx)
}

// durable tells the call's runner what the API server now holds of the
// call (written, whose current attempt is attempt): the provider may hand
// the attempt's sandbox its body once the status names it
// (sandbox.Preparer's Recorded), and once the status holds the result the
// work of attempts 1..attempt ends (Discard; what it leaves, releaseCall
// removes). The runner decides from the durable status alone: the
// reconciler only says a write happened.
func (r callRunner) durable(ctx context.Context, written *toolgatev1alpha1.ToolCall, attempt int) {
	if r.provider == nil || attempt <= 0 {
		return
	}
	if rec, ok := r.provider.(sandbox.Preparer); ok && written.Status.Sandbox != "" {
		rec.Recorded(sandbox.Key(written.UID, attempt), written.Status.Sandbox)
	}
	if written.Status.Result == nil {
		return
	}
	for a := 1; a <= attempt; a++ {
		r.provider.Discard(ctx, sandbox.Key(written.UID, a))
	}
}

// releaseCall asks every mounted sandbox provider to stop and forget the
// call's work (which one ran it may be in a profile that is gone); it
// reports whether nothing is left.
func releaseCall(ctx context.Context, mounts *sandbox.Mounts, owner types.NamespacedName, uid types.UID) (bool, error) {
	gone := true
	for _, p := range mounts.All() {
		g, err := p.Release(ctx, owner, uid)
		if err != nil {
			return false, err
		}
		gone = gone && g
	}
	return gone, nil
}

// The profile checks.

// refusedPolicy says why the mounted sandbox provider cannot run spec's
// sandbox policy at all, or "".
func refusedPolicy(spec *toolgatev1alpha1.ToolProfileSpec, sandboxes *sandbox.Mounts) string {
	if sandboxes == nil {
		return ""
	}
	p, ok := sandboxes.Get(string(spec.Sandbox.Provider))
	if !ok {
		return ""
	}
	if err := p.Validate(spec.Sandbox); err != nil {
		return "the " + string(spec.Sandbox.Provider) + " sandbox provider refuses the policy: " + err.Error()
	}
	return ""
}

// resolveSandbox reports the policy as the mounted provider enforces it,
// and what of the profile's tools it will not run in this install; recheck
// when that depends on objects nothing here watches (a RuntimeClass).
func (r *ToolProfileReconciler) resolveSandbox(ctx context.Context, spec *toolgatev1alpha1.ToolProfileSpec) (*toolgatev1alpha1.ResolvedSandbox, bool) {
	p := spec.Sandbox
	out := &toolgatev1alpha1.ResolvedSandbox{Mode: p.Mode, WorkspaceRoot: p.WorkspaceRoot, Provider: p.Provider, RuntimeClassName: ptr.Deref(p.RuntimeClassName, "")}
	provider, ok := r.Sandboxes.Get(string(p.Provider))
	if !ok {
		out.Enforcement = toolgatev1alpha1.EnforcementPartial
		out.EnforcementReason = "the " + string(p.Provider) + " sandbox provider is not mounted in this manager; calls fail until it is"
		return out, false
	}
	full, reason := provider.Enforcement(p)
	var reasons []string
	if !full {
		reasons = append(reasons, reason)
	}
	more, recheck := provider.CheckProfile(ctx, spec)
	reasons = append(reasons, more...)
	out.Enforcement = toolgatev1alpha1.EnforcementFull
	if len(reasons) > 0 {
		out.Enforcement, out.EnforcementReason = toolgatev1alpha1.EnforcementPartial, textutil.Truncate(strings.Join(reasons, "; "), maxEnforcementReason)
	}
	return out, recheck
}

// isolationCondition audits the session's namespace for what widens its
// tool pods' isolation, when the profile's sandbox provider can tell (nil
// otherwise: the condition keeps its last value).
func (r *AgentSessionReconciler) isolationCondition(ctx context.Context, s *toolgatev1alpha1.AgentSession, obj *toolgatev1alpha1.ToolProfile) *metav1.Condition {
	if obj == nil {
		return nil
	}
	provider, ok := r.Sandboxes.Get(string(obj.Spec.Sandbox.Provider))
	if !ok {
		return nil
	}
	widened, err := provider.Audit(ctx, s.Namespace, obj.Spec.Sandbox)
	if errors.Is(err, sandbox.ErrNotApplicable) {
		return nil
	}
	if err != nil {
		log.FromContext(ctx).Error(err, "sandbox isolation not audited", "session", s.Name)
		return nil
	}
	c := &metav1.Condition{Type: toolgatev1alpha1.ConditionSandboxIsolated, ObservedGeneration: s.Generation,
		Status: metav1.ConditionTrue, Reason: toolgatev1alpha1.AgentSessionReasonIsolated, Message: "nothing else in the namespace selects this session's tool pods"}
	if widened != "" {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, toolgatev1alpha1.AgentSessionReasonAdditiveNetworkPolicy, widened
	}
	return c
}

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
	job.Record = r.record(ctx)
	res, err := r.provider.Run(ctx, job)
	exec.Sandbox = res.Where
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

// listerOf is the profile's sandbox provider as a lister of MCP servers;
// nil when it is not mounted or cannot list.
func listerOf(sandboxes *sandbox.Mounts, spec *toolgatev1alpha1.ToolProfileSpec) sandbox.Lister {
	if sandboxes == nil {
		return nil
	}
	p, ok := sandboxes.Get(string(spec.Sandbox.Provider))
	if !ok {
		return nil
	}
	l, _ := p.(sandbox.Lister)
	return l
}

// listServer asks lister for the listing job names: its tools, ErrPending
// while it runs, or why the server could not be listed.
func listServer(ctx context.Context, lister sandbox.Lister, job sandbox.ListJob) ([]runner.MCPTool, error) {
	return lister.List(ctx, job)
}

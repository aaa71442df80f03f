package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/providers"
	"github.com/toolgate/toolgate/internal/runner"
)

// Key names attempt of the call with uid: the Job.Key every driver uses.
func Key(uid types.UID, attempt int) string { return fmt.Sprintf("%s/%d", uid, attempt) }

// OfCall reports whether key names an attempt of the call with uid.
func OfCall(key string, uid types.UID) bool { return strings.HasPrefix(key, string(uid)+"/") }

// Job is one attempt of one call's body.
type Job struct {
	// Key identifies the attempt: the same key always names the same work,
	// so a provider re-attaches to it instead of starting it twice.
	Key string
	// Attempt is the 1-based attempt number.
	Attempt int
	// Owner is the ToolCall the attempt belongs to.
	Owner types.NamespacedName
	// OwnerUID is the ToolCall's UID (for owner references).
	OwnerUID types.UID
	// Traceparent is the call's trace context annotation: a provider that
	// knows when the body ran adds its span to the call's trace.
	Traceparent string
	// Tool is the definition to run.
	Tool *toolgatev1alpha1.ToolDefinition
	// Arguments is the call's JSON text.
	Arguments string
	// Policy is the profile's sandbox policy (defaults applied).
	Policy toolgatev1alpha1.SandboxPolicy
	// Session is the session the call belongs to: its workspace, and
	// what its provider may keep ready for its next calls.
	Session Session
	// Resumed is true when the attempt was started before (by this process
	// or a previous one): the provider must re-attach, never start again.
	Resumed bool
	// Dispatched is when the attempt was dispatched (persisted): a provider
	// bounds the time its sandbox takes to get ready from it. The tool's
	// timeout is not counted from it but from the body's own start.
	Dispatched time.Time
	// Record is the call's durable record of where its attempts run, when
	// its caller keeps one (nil: it does not, and a provider hands a body
	// to its sandbox at once).
	Record *Record
}

// Record is a call's durable record of its sandboxes, as its caller (the
// ToolCall controller) last wrote it: the call records Result.Where and
// Preparer.Where in its status. A Preparer hands the body only to a
// sandbox so recorded, so a successor that finds no sandbox where the
// record names none knows nothing ran: never a body lost with a sandbox
// nobody had written down.
type Record struct {
	// Where is what the call's status names for this attempt ("": nothing
	// yet).
	Where string
	// Taken names the sandboxes the records of the session's other
	// unsettled calls name: a provider never gives one of them to this
	// attempt (a manager that stopped may have recorded one before it
	// finished taking it).
	Taken []string
}

// What a tool's body may reach (ResolvedTool.network).
const (
	NetworkNone   = "none"   // nothing
	NetworkEgress = "egress" // every public address: the profile's allowEgress, or FullAccess
	NetworkHosts  = "hosts"  // the hosts the tool names, through the egress proxy only
)

// Network is what tool's body may reach under policy: a tool naming its
// hosts reaches them and nothing else, whatever the profile allows the
// others.
func Network(tool *toolgatev1alpha1.ToolDefinition, policy toolgatev1alpha1.SandboxPolicy) string {
	switch {
	case tool != nil && tool.Egress != nil:
		return NetworkHosts
	case policy.AllowEgress || policy.Mode == toolgatev1alpha1.SandboxFullAccess:
		return NetworkEgress
	}
	return NetworkNone
}

// EgressHosts lists the host:port pairs a tool names, a credential's
// host marked " (credential)".
func EgressHosts(tool *toolgatev1alpha1.ToolDefinition) []string {
	if tool == nil || tool.Egress == nil {
		return nil
	}
	cred := map[string]bool{}
	for _, c := range tool.Egress.Credentials {
		cred[c.Host] = true
	}
	var out []string
	for _, h := range tool.Egress.Hosts {
		ports := h.Ports
		if len(ports) == 0 {
			ports = []int32{egress.DefaultPort}
		}
		for _, p := range ports {
			s := net.JoinHostPort(h.Host, strconv.Itoa(int(p)))
			if cred[h.Host] {
				s += " (credential)"
			}
			out = append(out, s)
		}
	}
	return out
}

// Writable tells whether tools of policy may write the workspace.
func Writable(policy toolgatev1alpha1.SandboxPolicy) bool {
	return policy.Mode == toolgatev1alpha1.SandboxWorkspaceWrite || policy.Mode == toolgatev1alpha1.SandboxFullAccess
}

// RunnerSpec is what the runner runs for job: a built-in, or the exact
// argv and literal env with its output bound (an MCP server's, asked the
// tool); and the tool's timeout, which
// the runner counts from the moment the body starts. workspace is the root
// the tool sees ("" without a workspace).
func RunnerSpec(job Job, workspace string) runner.Spec {
	spec := runner.Spec{TimeoutMillis: int64(job.Tool.TimeoutSeconds) * 1000}
	if workspace != "" {
		spec.Workspace, spec.Writable = workspace, Writable(job.Policy)
	}
	if b := job.Tool.Builtin; b != nil {
		spec.Builtin = b.Name
	} else if c := job.Tool.Container; c != nil {
		spec.Argv, spec.MaxOutputBytes = c.Command, int(c.MaxOutputBytes)
		if len(c.Env) > 0 {
			spec.Env = map[string]string{}
			for _, e := range c.Env {
				spec.Env[e.Name] = e.Value
			}
		}
		if m := job.Tool.MCP; m != nil {
			// The container is the MCP server's (RunnableTools): the body
			// is the server, asked this tool.
			spec.MCPTool, spec.MCPSchemaDigest = m.ToolName(job.Tool.Name), m.SchemaDigest
			// A server may send structured content with no output schema
			// of its own: a tool declared to return a string takes its text.
			var out struct {
				Type any `json:"type"`
			}
			spec.MCPText = json.Unmarshal(job.Tool.Output.Schema.Raw, &out) == nil && out.Type == "string"
		}
	}
	return spec
}

// Session is what a provider knows of the call's session.
type Session struct {
	// NamespacedName and UID are the session's (the owner of sandboxes
	// kept ready for it).
	types.NamespacedName
	UID types.UID
	// ClaimName is the PersistentVolumeClaim mounted by pod providers; empty
	// without a workspace.
	ClaimName string
	// WarmPods is how many sandboxes of each kind the provider may keep
	// ready ahead of the session's next calls (the session's warmPods,
	// bounded by its maxParallel); 0: none.
	WarmPods int
}

// Warm reports whether sandboxes may be kept ready for the session.
func (s Session) Warm() bool { return s.WarmPods > 0 && s.UID != "" }

// Result is what the tool produced.
type Result struct {
	// Stdout is the tool's output (its value, as text).
	Stdout string
	// Stderr is a bounded tail of the tool's diagnostics.
	Stderr string
	// ExitCode is the process exit code.
	ExitCode int
	// Contexts are the messages the tool deferred for the model.
	Contexts []string
	// Truncated says Stdout hit its bound and was cut.
	Truncated bool
	// Where names where the attempt runs, as the provider knows it (the
	// pod provider: its pod), with every answer of Run, ErrPending
	// included; "" when the provider does not say. The call records it
	// durably and hands it back as Job.Record.Where.
	Where string
}

var (
	// ErrPending means the attempt is still running; the provider notifies
	// when it ends.
	ErrPending = errors.New("sandbox: the attempt is still running")
	// ErrLost means the attempt was started but its work no longer exists
	// (for example it died with a previous manager process).
	ErrLost = errors.New("sandbox: the attempt's work was lost")
	// ErrNotApplicable means the provider has nothing of the kind asked
	// to check (Audit of a provider whose isolation nothing widens).
	ErrNotApplicable = errors.New("sandbox: not applicable to this provider")
)

// Provider runs attempts. Run starts the job's work the first time it sees
// the key (unless Resumed), answers ErrPending while it runs, and returns its
// Result once it has ended and its owned processes have stopped. When ctx is
// cancelled or past its deadline, Run stops the work, waits for it to be
// gone, and returns ctx.Err().
type Provider interface {
	Run(ctx context.Context, job Job) (Result, error)
	// Enforcement says whether the provider enforces every restriction of
	// policy, and if not, which one and why.
	Enforcement(policy toolgatev1alpha1.SandboxPolicy) (full bool, reason string)
	// Validate refuses a policy the provider cannot run at all (a profile
	// using it is not Ready); nil when it can.
	Validate(policy toolgatev1alpha1.SandboxPolicy) error
	// Discard ends a settled attempt: it removes what is left of its work
	// at once (the pod provider deletes its pod) and forgets it. Best
	// effort: what it leaves, the call's Release removes.
	Discard(ctx context.Context, key string)
	// Release stops every attempt's work of a call and forgets it, for a
	// call settled without its pipeline (its session or profile is gone) or
	// left with work behind after a crash. It reports whether nothing of
	// the call is left running; callers ask again until it is.
	Release(ctx context.Context, owner types.NamespacedName, uid types.UID) (gone bool, err error)
	// CheckProfile tells, beyond the sandbox policy, what of a profile the
	// provider will not enforce: tools' own needs it cannot meet in this
	// install, and objects the policy names that do not exist. Each reason
	// makes the profile's enforcement Partial; recheck says the answer
	// rests on objects that may appear later (the profile is checked
	// again). A provider with nothing to add returns nil, false.
	CheckProfile(ctx context.Context, spec *toolgatev1alpha1.ToolProfileSpec) (reasons []string, recheck bool)
	// Audit says what widens the isolation of policy's sandboxes in
	// namespace, "" when nothing does: other objects of a namespace may
	// (the pod provider: NetworkPolicies add up, so another policy
	// selecting tool pods allows what toolgate's deny). A provider whose
	// isolation nothing in a namespace can widen returns ErrNotApplicable.
	Audit(ctx context.Context, namespace string, policy toolgatev1alpha1.SandboxPolicy) (string, error)
}

// Preparer is the seam's one optional capability: a provider that can
// get an attempt's sandbox ready before the attempt's dispatch boundary is
// written, holding nothing of the call and running nothing until Run (the
// pod provider: the pod, whose runner waits to be handed the call). A
// manager that dies right after writing the boundary then leaves a sandbox
// its successor finds idle, and hands the call to it, instead of an
// attempt it cannot account for. Prepare is best effort: Run does
// whatever Prepare did not. Where names the sandbox Prepare got ready, for
// the boundary to record ("" when none); Recorded tells the provider that
// the call's status now durably names where the attempt runs (Job.Record):
// its sandbox may be handed the body from then on.
type Preparer interface {
	Prepare(ctx context.Context, job Job) error
	Where(key string) string
	Recorded(key, where string)
}

// Mounts are the mounted sandbox providers, by the profile's provider name.
type Mounts = providers.Mounts[Provider]

// SubCalls runs a sub-call a body of parent's attempt made (Code Mode)
// through the whole pipeline, as its own ToolCall nested under parent's,
// and returns its settled result. The controllers provide it; providers
// serve it to their bodies.
type SubCalls func(ctx context.Context, parent Job, call runner.SubCall) runner.SubResult

// Notifier is told when an attempt's work ends, so its call is reconciled at
// once instead of at the next poll.
type Notifier func(owner types.NamespacedName)

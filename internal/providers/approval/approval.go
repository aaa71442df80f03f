package approval

import (
	"context"
	"encoding/json"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers"
	"github.com/toolgate/toolgate/internal/textutil"
)

// Provider answers approval questions about a subject. Approve must be
// idempotent per subject (it is asked again while the answer is pending and
// after restarts).
type Provider interface {
	Approve(ctx context.Context, s Subject, q pipeline.Question) (pipeline.Answer, string)
	// Available is false when every question would fail closed.
	Available() bool
	// Close records how a question ended when the call settled without the
	// provider's answer (expired, cancelled); it is idempotent.
	Close(ctx context.Context, s Subject, code pipeline.Code) error
}

// For binds p to one subject: the pipeline's Approver for one call.
func For(p Provider, s Subject) pipeline.Approver { return bound{p, s} }

type bound struct {
	p Provider
	s Subject
}

func (b bound) Approve(ctx context.Context, q pipeline.Question) (pipeline.Answer, string) {
	return b.p.Approve(ctx, b.s, q)
}

// Mounts are the mounted approval providers, by the profile's provider name.
type Mounts = providers.Mounts[Provider]

// Subject is the object a question is about, and how to present it.
type Subject struct {
	// Owner is the ToolCall; a provider's objects are owned by it.
	Owner client.Object
	// Session names the call's AgentSession, shown to the approver.
	Session string
	// Redact lists top-level argument names hidden from the approver.
	Redact []string
	// Notify names the notification sinks told of the question, beside
	// the install's default ones.
	Notify []string
	// RelayMessages asks that an approval's messages reach the model
	// (the question says so to its approvers).
	RelayMessages bool
}

// QuorumOf is the pipeline's form of a profile's or a question's
// approvers (nil: none named, one approval from anyone allowed the verb
// approve).
func QuorumOf(a *toolgatev1alpha1.Approvers) *pipeline.Quorum {
	if a == nil {
		return nil
	}
	return &pipeline.Quorum{Required: max(int(a.Required), 1), Users: slices.Clone(a.Users), Groups: slices.Clone(a.Groups)}
}

// ApproversOf is the API's form of a question's quorum.
func ApproversOf(q *pipeline.Quorum) *toolgatev1alpha1.Approvers {
	if q == nil {
		return nil
	}
	return &toolgatev1alpha1.Approvers{Required: int32(max(q.Required, 1)), Users: slices.Clone(q.Users), Groups: slices.Clone(q.Groups)}
}

// MaxPreview bounds the argument preview an approver sees.
const MaxPreview = 8192

// Preview renders arguments for an approver: redacted top-level fields
// replaced by "[redacted]", keys sorted, cut to MaxPreview bytes.
func Preview(args pipeline.Arguments, redact []string) string {
	v := args.Value()
	if m, ok := v.(map[string]any); ok {
		for _, k := range redact {
			if _, present := m[k]; present {
				m[k] = "[redacted]"
			}
		}
	}
	text, err := pipeline.CanonicalJSON(v)
	if err != nil {
		data, _ := json.Marshal(v)
		text = string(data)
	}
	return textutil.TruncateMarked(text, MaxPreview, "…[truncated]")
}

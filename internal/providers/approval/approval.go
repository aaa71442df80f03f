package approval

import (
	"context"
	"encoding/json"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers"
)

// Provider answers approval questions. Approve must be idempotent per call
// (it is asked again while the answer is pending and after restarts).
type Provider interface {
	pipeline.Approver
	// Available is false when every question would fail closed.
	Available() bool
	// Close records how a question ended when the call settled without the
	// provider's answer (expired, cancelled); it is idempotent.
	Close(ctx context.Context, s Subject, code pipeline.Code) error
}

// Mounts are the mounted approval providers, by the profile's provider name.
type Mounts = providers.Mounts[Provider]

// Subject is the object a question is about, and how to present it.
type Subject struct {
	// Owner is the ToolCall; a provider's objects are owned by it.
	Owner client.Object
	// Redact lists top-level argument names hidden from the approver.
	Redact []string
}

type subjectKey struct{}

// WithSubject returns ctx carrying s for the provider.
func WithSubject(ctx context.Context, s Subject) context.Context {
	return context.WithValue(ctx, subjectKey{}, s)
}

// SubjectFrom returns the subject carried by ctx.
func SubjectFrom(ctx context.Context) (Subject, bool) {
	s, ok := ctx.Value(subjectKey{}).(Subject)
	return s, ok
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
	if len(text) > MaxPreview {
		text = text[:MaxPreview-len("…[truncated]")] + "…[truncated]"
	}
	return text
}

// Package none is the approval provider that answers nothing: every Ask
// fails closed as approval_unavailable. It is what a profile gets with
// approval.provider None, and what an unattended deployment should use.
package none

import (
	"context"

	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/approval"
)

// Provider fails every question closed.
type Provider struct{}

var _ approval.Provider = Provider{}

// Approve answers Unavailable.
func (Provider) Approve(context.Context, approval.Subject, pipeline.Question) (pipeline.Answer, string) {
	return pipeline.Unavailable, "approval is disabled for this profile (provider None)"
}

// Available is false.
func (Provider) Available() bool { return false }

// Close has nothing to close.
func (Provider) Close(context.Context, approval.Subject, pipeline.Code) error { return nil }

package controller

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/audit"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/toolcalls"
)

// auditCall writes the settled call's audit record, once per process. A
// call settled before this process led, and longer ago than
// announceWindow, was recorded by its predecessor; one settled more
// recently may have been (a crash between the result and the record), so
// it is written again, under the same id: at least once.
func (r *ToolCallReconciler) auditCall(ctx context.Context, s *callScope) {
	tc := s.tc
	if r.Audit == nil || tc.Status.Result == nil {
		return
	}
	first := false
	r.mem.with(tc, func(m *memo) { first, m.audited = !m.audited, true })
	if !first {
		return
	}
	key := client.ObjectKeyFromObject(tc)
	if r.Clock.Since(tc.Status.Result.SettledAt.Time) > announceWindow {
		return
	}
	if strippedInCache(tc) {
		// The cache keeps a call without its bulk (cachestrip.go): the
		// digests are of the call as stored.
		full := &toolgatev1alpha1.ToolCall{}
		if err := r.reader().Get(ctx, key, full); err == nil && full.UID == tc.UID {
			tc = full
		}
	}
	var ar *toolgatev1alpha1.ApprovalRequest
	if toolcalls.AskedApproval(tc) {
		// From the API server: the question's end was written by this
		// reconcile (Close), which the cache may not show yet.
		ar = &toolgatev1alpha1.ApprovalRequest{}
		if err := r.reader().Get(ctx, key, ar); err != nil || !metav1.IsControlledBy(ar, tc) {
			ar = nil
		}
	}
	var f audit.CallFacts
	if s.pipe != nil {
		f.RuntimeClass = ptr.Deref(s.runner.job.Policy.RuntimeClassName, "")
	}
	session := s.session
	if session == nil {
		// A call settled before this reconcile (a new leader writing its
		// record again) has no scope built: the session and its profile
		// are read for the record.
		session = &toolgatev1alpha1.AgentSession{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: tc.Namespace, Name: tc.Spec.SessionRef.Name}, session); err != nil {
			session = nil
		}
	}
	if session != nil {
		f.Profile = session.Spec.ProfileRef.Name
		if s.pipe == nil {
			// The profile as it is now: a record is written again only
			// within announceWindow of the result.
			p := &toolgatev1alpha1.ToolProfile{}
			if err := r.Client.Get(ctx, client.ObjectKey{Namespace: tc.Namespace, Name: f.Profile}, p); err == nil {
				f.RuntimeClass = ptr.Deref(p.Spec.Sandbox.RuntimeClassName, "")
			}
		}
	}
	if ar != nil {
		// What an approver read and decided on, as the question froze it
		// (redacted then). A call nobody was asked about is recorded by
		// its digest alone: arguments stay out of the manager's output.
		f.ArgumentsPreview = ar.Spec.ArgumentsPreview
	}
	if !strippedInCache(tc) {
		if d := r.AuditDigests.Arguments; d != nil {
			f.ArgumentsDigest = d(pipeline.ArgumentsOf(tc.Spec.Arguments))
		}
		if d := r.AuditDigests.Result; d != nil {
			f.ResultDigest = d(tc.Status.Result.Value, tc.Status.Result.Content)
		}
		f.DigestKey = r.AuditDigests.KeyID
	}
	r.Audit.Write(audit.ForCall(tc, ar, f))
}

// Package apiserver is the approval provider backed by the API server: a
// question is an ApprovalRequest owned by its ToolCall and named after it; a
// person answers by setting spec.decision (kubectl edit/patch, or
// `kubectl toolgate approve`). Admission decides who may answer.
package apiserver

import (
	"context"
	"crypto/hmac"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/audit"
	"github.com/toolgate/toolgate/internal/keys"
	"github.com/toolgate/toolgate/internal/notify"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/approval"
	"github.com/toolgate/toolgate/internal/textutil"
)

// Provider creates and reads ApprovalRequests.
type Provider struct {
	Client client.Client
	Clock  clock.PassiveClock
	// Key is the manager's secret (every replica's and every restart's):
	// the arguments digest and the question's seal are MACs under keys
	// derived from it, which nobody else can compute.
	Key []byte
	// Previous is the secret before the last rotation (nil: none): a
	// question asked under it is still the call's.
	Previous []byte
	// Audit receives a record each time a question ends (nil: none).
	Audit audit.Sink
	// Notifier tells people when a question opens and ends (nil: nobody).
	Notifier *notify.Notifier

	// told remembers, for tellWindow, the phases this process wrote and
	// told of (audit, notifications), by request UID and phase.
	mu   sync.Mutex
	told *cache.Expiring
}

// tellWindow is how long a told phase is remembered: far longer than a
// cache lags a write.
const tellWindow = 10 * time.Minute

// firstTelling reports whether key is told for the first time in
// tellWindow, and remembers it.
func (p *Provider) firstTelling(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.told == nil {
		p.told = cache.NewExpiring()
	}
	if _, ok := p.told.Get(key); ok {
		return false
	}
	p.told.Set(key, struct{}{}, tellWindow)
	return true
}

var _ approval.Provider = &Provider{}

// New returns a provider using c, sealing questions under key.
func New(c client.Client, clk clock.PassiveClock, key []byte) *Provider {
	return &Provider{Client: c, Clock: clk, Key: key}
}

// Name is the deterministic name of the ApprovalRequest for a call: the
// call's own name, so a restart finds (adopts) the one it created.
func Name(call client.Object) string { return call.GetName() }

// Approve gets or creates the call's ApprovalRequest and maps its decision:
// Approve → allowed-once, Deny → rejected, none yet → pending. An API error
// is answered as pending, so the question is asked again until the
// pipeline's deadline fails it closed.
func (p *Provider) Approve(ctx context.Context, subj approval.Subject, q pipeline.Question) (pipeline.Answer, string) {
	if subj.Owner == nil {
		return pipeline.Unavailable, "the approval question has no subject"
	}
	ar := &toolgatev1alpha1.ApprovalRequest{}
	key := client.ObjectKey{Namespace: subj.Owner.GetNamespace(), Name: Name(subj.Owner)}
	err := p.Client.Get(ctx, key, ar)
	if apierrors.IsNotFound(err) {
		// Created or not (a failure is retried at the next ask), nobody
		// has answered yet.
		if err := p.create(ctx, subj, q); err != nil {
			log.FromContext(ctx).Error(err, "approval request not created", "call", subj.Owner.GetName())
		}
		return pipeline.AnswerPending, ""
	}
	if err != nil {
		log.FromContext(ctx).Error(err, "approval request not read", "call", subj.Owner.GetName())
		return pipeline.AnswerPending, ""
	}
	if !metav1.IsControlledBy(ar, subj.Owner) {
		if predecessorsQuestion(ar, subj.Owner) {
			// The question of a call deleted before it: the garbage
			// collector removes it in time; removed now, the call is asked
			// its own question (no answer to the old one counts: each
			// names the old request's UID).
			uid := ar.UID
			if err := p.Client.Delete(ctx, ar, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
				log.FromContext(ctx).Error(err, "a predecessor's approval request not deleted", "call", subj.Owner.GetName())
			}
			return pipeline.AnswerPending, ""
		}
		// A same-named request this call does not own is not its question.
		return pipeline.Unavailable, "an ApprovalRequest of that name belongs to another object"
	}
	if !p.asksUnderAnyKey(ar, subj, q) {
		// Someone created this request before toolgate did: what an
		// approver read there is not this call's question, so no answer to
		// it counts.
		return pipeline.Unavailable, "the ApprovalRequest does not ask this call's question (requester, tool or arguments differ)"
	}
	d := ar.Spec.Decision
	if d != nil && !ar.Answered(d.RequestUID, d.Question) {
		// Admission refuses a decision that does not name the question its
		// approver read; one written around it answers nothing toolgate
		// asked, and a decision is never changed: the call fails closed.
		log.FromContext(ctx).Info("approval decision names another question", "request", ar.Name)
		return pipeline.Unavailable, "the ApprovalRequest's decision does not name this question (its UID and question seal): nobody answered what toolgate asked"
	}
	if d == nil {
		if approved(ar) {
			p.setPhase(ctx, ar, toolgatev1alpha1.ApprovalApproved)
			return pipeline.AllowedOnce, relayed(ar)
		}
		// Pending: the phase (its creator may have stopped before writing
		// it; approvers look for Pending) and the approvals counted so far.
		p.setPhase(ctx, ar, toolgatev1alpha1.ApprovalPending)
		return pipeline.AnswerPending, ""
	}
	switch d.Action {
	case toolgatev1alpha1.DecisionApprove:
		p.setPhase(ctx, ar, toolgatev1alpha1.ApprovalApproved)
		return pipeline.AllowedOnce, relayed(ar)
	case toolgatev1alpha1.DecisionDeny:
		p.setPhase(ctx, ar, toolgatev1alpha1.ApprovalDenied)
		msg := "denied by " + d.DecidedBy
		if d.Message != "" {
			msg += ": " + d.Message
		}
		return pipeline.Rejected, msg
	default:
		return pipeline.Unavailable, "the decision is not understood"
	}
}

// predecessorsQuestion reports whether ar was asked about an earlier call
// of owner's name, deleted since: its controller is a ToolCall of that
// name with another UID.
func predecessorsQuestion(ar *toolgatev1alpha1.ApprovalRequest, owner client.Object) bool {
	c := metav1.GetControllerOf(ar)
	return c != nil && c.Kind == "ToolCall" && c.Name == owner.GetName() && c.UID != owner.GetUID() &&
		ar.Spec.ToolCallRef.Name == owner.GetName()
}

// relayed is what the model is told of an approval, when the question
// said its approvers' messages reach it: one line per approver who wrote
// one (the requester's entry, which admission refuses, never counts).
func relayed(ar *toolgatev1alpha1.ApprovalRequest) string {
	if !ar.Spec.RelayApprovalMessages {
		return ""
	}
	var lines []string
	say := func(user, msg string) {
		if msg != "" && user != ar.Spec.Requester {
			lines = append(lines, "approved by "+user+": "+textutil.OneLine(msg, 1024))
		}
	}
	for _, a := range ar.Spec.Approvals {
		say(a.User, a.Message)
	}
	if d := ar.Spec.Decision; d != nil && d.Action == toolgatev1alpha1.DecisionApprove {
		say(d.DecidedBy, d.Message)
	}
	return strings.Join(lines, "\n")
}

// answeredBy are the people who approved or decided ar, in order.
func answeredBy(ar *toolgatev1alpha1.ApprovalRequest) []string {
	var names []string
	for _, a := range ar.Spec.Approvals {
		names = append(names, a.User)
	}
	if d := ar.Spec.Decision; d != nil && !slices.Contains(names, d.DecidedBy) {
		names = append(names, d.DecidedBy)
	}
	return names
}

func approved(ar *toolgatev1alpha1.ApprovalRequest) bool {
	n, required := ar.ApprovalCount()
	return n >= required
}

// question is the request the provider asks about one call, sealed. Its
// deadline is the one the pipeline enforces, to the microsecond (a whole
// second would show an approver a deadline up to a second early).
func (p *Provider) question(subj approval.Subject, q pipeline.Question) *toolgatev1alpha1.ApprovalRequest {
	reason := q.Reason
	if q.Message != "" {
		reason += ": " + q.Message
	}
	var session *toolgatev1alpha1.LocalObjectReference
	if subj.Session != "" {
		session = &toolgatev1alpha1.LocalObjectReference{Name: subj.Session}
	}
	ar := &toolgatev1alpha1.ApprovalRequest{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: subj.Owner.GetNamespace(), Name: Name(subj.Owner),
			Annotations: map[string]string{toolgatev1alpha1.AnnotationArgumentsDigest: p.digest(q.Call.Args)},
		},
		Spec: toolgatev1alpha1.ApprovalRequestSpec{
			ToolCallRef:           toolgatev1alpha1.LocalObjectReference{Name: subj.Owner.GetName()},
			SessionRef:            session,
			Tool:                  q.Call.Tool,
			ArgumentsPreview:      approval.Preview(q.Call.Args, subj.Redact),
			Reason:                textutil.Truncate(reason, 1024),
			Requester:             q.Call.Requester,
			Deadline:              metav1.NewMicroTime(q.Deadline),
			Approvers:             approval.ApproversOf(q.Quorum),
			Notify:                slices.Clone(subj.Notify),
			RelayApprovalMessages: subj.RelayMessages,
		},
	}
	ar.Annotations[toolgatev1alpha1.AnnotationQuestionSeal] = p.seal(ar)
	return ar
}

// asks reports whether a request found in the cluster asks want's
// question. Only a request toolgate wrote counts: its seal covers
// everything an approver reads (call, session, tool, arguments preview,
// reason, requester, deadline) and the arguments digest, under the
// manager's key. The arguments are compared by the digest (of the call's
// arguments now, which cannot change), the rest as the seal froze it: a
// decision on the question as asked stays valid when the profile's
// redaction list or message changes while it is open.
func (p *Provider) asks(found, want *toolgatev1alpha1.ApprovalRequest) bool {
	f, w := found.Spec, want.Spec
	if f.ToolCallRef != w.ToolCallRef || f.Requester != w.Requester || f.Tool != w.Tool ||
		(f.SessionRef == nil) != (w.SessionRef == nil) || (f.SessionRef != nil && *f.SessionRef != *w.SessionRef) {
		return false
	}
	if found.Annotations[toolgatev1alpha1.AnnotationArgumentsDigest] != want.Annotations[toolgatev1alpha1.AnnotationArgumentsDigest] {
		return false
	}
	got, err := hex.DecodeString(found.Annotations[toolgatev1alpha1.AnnotationQuestionSeal])
	if err != nil {
		return false
	}
	seal, _ := hex.DecodeString(p.seal(found))
	return len(p.Key) > 0 && hmac.Equal(got, seal)
}

// asksUnderAnyKey is asks under the current key, else the previous one
// (a question asked before the last rotation).
func (p *Provider) asksUnderAnyKey(found *toolgatev1alpha1.ApprovalRequest, subj approval.Subject, q pipeline.Question) bool {
	if p.asks(found, p.question(subj, q)) {
		return true
	}
	if len(p.Previous) == 0 {
		return false
	}
	old := &Provider{Client: p.Client, Clock: p.Clock, Key: p.Previous}
	return old.asks(found, old.question(subj, q))
}

// digest is a MAC of the arguments' canonical JSON (of their text when
// they have no canonical form), as "hmac-sha256:<hex>": it tells whether
// two questions are about the same arguments, and nothing about the
// arguments to whoever reads it (a redacted value cannot be guessed from
// it).
func (p *Provider) digest(args pipeline.Arguments) string { return ArgumentsDigest(p.Key, args) }

// ArgumentsDigest is the digest of args under the manager's secret, as an
// ApprovalRequest's arguments-digest annotation holds it.
func ArgumentsDigest(secret []byte, args pipeline.Arguments) string {
	text, err := pipeline.CanonicalJSON(args.Value())
	if err != nil {
		text = args.JSON()
	}
	return keys.Digest(secret, keys.UseArguments, text)
}

// AuditDigests are the audit trail's digests under the manager's secret:
// an argument digest equal to the annotation of a question asked under
// the same secret.
func AuditDigests(secret []byte) audit.Digests {
	return audit.Digests{
		Arguments: func(a pipeline.Arguments) string { return ArgumentsDigest(secret, a) },
		Result:    func(value, content string) string { return ResultDigest(secret, value, content) },
		KeyID:     keys.KeyID(secret),
	}
}

// sealKeyID is the ID of the key that sealed ar (and made its arguments
// digest): the current one, or the previous one for a question asked
// before the last rotation; empty when neither did.
func (p *Provider) sealKeyID(ar *toolgatev1alpha1.ApprovalRequest) string {
	seal := ar.Annotations[toolgatev1alpha1.AnnotationQuestionSeal]
	for _, k := range [][]byte{p.Key, p.Previous} {
		if len(k) > 0 && hmac.Equal([]byte(seal), []byte((&Provider{Key: k}).seal(ar))) {
			return keys.KeyID(k)
		}
	}
	return ""
}

// ResultDigest is the digest of a call's result (its value and the content
// the model read) under the manager's secret.
func ResultDigest(secret []byte, value, content string) string {
	return keys.Digest(secret, keys.UseResult, value, content)
}

// seal is the MAC of what an approver reads on ar, and its arguments
// digest.
func (p *Provider) seal(ar *toolgatev1alpha1.ApprovalRequest) string {
	s := ar.Spec
	session := ""
	if s.SessionRef != nil {
		session = "session:" + s.SessionRef.Name
	}
	parts := []string{ar.Namespace, ar.Name, s.ToolCallRef.Name, session, s.Tool,
		s.ArgumentsPreview, s.Reason, s.Requester, s.Deadline.UTC().Truncate(time.Microsecond).Format(time.RFC3339Nano),
		ar.Annotations[toolgatev1alpha1.AnnotationArgumentsDigest]}
	if a := s.Approvers; a != nil {
		// Who may answer is part of the question (a request without
		// approvers seals as it did before they existed).
		parts = append(parts, fmt.Sprintf("approvers:%d", a.Required), "users:"+strings.Join(a.Users, "\x00"), "groups:"+strings.Join(a.Groups, "\x00"))
	}
	if len(s.Notify) > 0 {
		parts = append(parts, "notify:"+strings.Join(s.Notify, "\x00"))
	}
	if s.RelayApprovalMessages {
		parts = append(parts, "relay-approval-messages")
	}
	return hex.EncodeToString(keys.MAC(p.Key, keys.UseQuestion, parts...))
}

func (p *Provider) create(ctx context.Context, subj approval.Subject, q pipeline.Question) error {
	ar := p.question(subj, q)
	if err := controllerutil.SetControllerReference(subj.Owner, ar, p.Client.Scheme()); err != nil {
		return err
	}
	if err := p.Client.Create(ctx, ar); err != nil {
		return err
	}
	p.setPhase(ctx, ar, toolgatev1alpha1.ApprovalPending)
	return nil
}

// Close records an unanswered question's end: Expired for a passed
// deadline, Cancelled otherwise.
func (p *Provider) Close(ctx context.Context, subj approval.Subject, code pipeline.Code) error {
	ar := &toolgatev1alpha1.ApprovalRequest{}
	err := p.Client.Get(ctx, client.ObjectKey{Namespace: subj.Owner.GetNamespace(), Name: Name(subj.Owner)}, ar)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if ar.Status.Phase != "" && ar.Status.Phase != toolgatev1alpha1.ApprovalPending {
		return nil
	}
	phase := toolgatev1alpha1.ApprovalCancelled
	if d := ar.Spec.Decision; d != nil && !ar.Answered(d.RequestUID, d.Question) {
		return p.setPhaseErr(ctx, ar, phase) // an answer to another question decided nothing
	}
	switch {
	case ar.Spec.Decision != nil && ar.Spec.Decision.Action == toolgatev1alpha1.DecisionApprove:
		phase = toolgatev1alpha1.ApprovalApproved // a person did decide: the record says so
	case ar.Spec.Decision == nil && approved(ar):
		phase = toolgatev1alpha1.ApprovalApproved
	case ar.Spec.Decision != nil:
		phase = toolgatev1alpha1.ApprovalDenied
	case code == pipeline.CodeApprovalExpired:
		phase = toolgatev1alpha1.ApprovalExpired
	}
	return p.setPhaseErr(ctx, ar, phase)
}

// Available is true: a person can always answer through the API server.
func (p *Provider) Available() bool { return true }

func (p *Provider) setPhase(ctx context.Context, ar *toolgatev1alpha1.ApprovalRequest, phase toolgatev1alpha1.ApprovalPhase) {
	// Best effort: the phase is for people; the call's result does not
	// depend on it.
	_ = p.setPhaseErr(ctx, ar, phase)
}

// setPhaseErr writes the phase and, with it, the Decided condition, and
// records when each approval was first seen. The writer of a new phase
// tells of it: the audit trail of an end, and the notified sinks of an
// opening and an end.
func (p *Provider) setPhaseErr(ctx context.Context, ar *toolgatev1alpha1.ApprovalRequest, phase toolgatev1alpha1.ApprovalPhase) error {
	cond := decided(phase, ar.Generation)
	recorded := recordApprovals(ar.Status.Approvals, ar.Spec.Approvals, metav1.NewTime(p.Clock.Now()))
	if ar.Status.Phase == phase && meta.IsStatusConditionPresentAndEqual(ar.Status.Conditions, cond.Type, cond.Status) &&
		len(recorded) == len(ar.Status.Approvals) {
		return nil
	}
	base := ar.DeepCopy()
	ar.Status.Approvals = recorded
	ar.Status.Phase = phase
	if phase != toolgatev1alpha1.ApprovalPending && ar.Status.ResolvedAt == nil {
		now := metav1.NewTime(p.Clock.Now())
		ar.Status.ResolvedAt = &now
	}
	meta.SetStatusCondition(&ar.Status.Conditions, cond)
	if err := p.Client.Status().Patch(ctx, ar, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("setting the approval request phase: %w", err)
	}
	if base.Status.Phase == phase {
		return nil
	}
	if !p.firstTelling(string(ar.UID) + "/" + string(phase)) {
		// Written again from a cache that had not seen the first write:
		// told once per process (at least once across processes).
		return nil
	}
	if phase != toolgatev1alpha1.ApprovalPending {
		// Who answered, for an operator (identities, never arguments).
		log.FromContext(ctx).Info("approval question ended", "request", ar.Name, "phase", string(phase), "approvers", answeredBy(ar))
	}
	if p.Audit != nil && phase != toolgatev1alpha1.ApprovalPending {
		// The question ended, as written: its record (at least once; a
		// second writer of the same end writes the same id).
		p.Audit.Write(audit.ForDecision(ar, p.sealKeyID(ar)))
	}
	if typ := notifyType(phase); typ != "" {
		// The sinks the question was asked with: its end is told where its
		// opening was, whichever reconcile writes it.
		p.Notifier.Notify(notify.EventOf(ar, typ, p.Clock.Now()), ar.Spec.Notify)
	}
	return nil
}

// notifyType is the notification of a question entering phase.
func notifyType(phase toolgatev1alpha1.ApprovalPhase) string {
	switch phase {
	case toolgatev1alpha1.ApprovalPending:
		return notify.TypeRequested
	case toolgatev1alpha1.ApprovalApproved, toolgatev1alpha1.ApprovalDenied:
		return notify.TypeDecided
	case toolgatev1alpha1.ApprovalExpired:
		return notify.TypeExpired
	case toolgatev1alpha1.ApprovalCancelled:
		return notify.TypeCancelled
	}
	return ""
}

// recordApprovals is the status's record of approvals with those of spec
// it lacks added at now (a record is never rewritten).
func recordApprovals(status []toolgatev1alpha1.RecordedApproval, spec []toolgatev1alpha1.Approval, now metav1.Time) []toolgatev1alpha1.RecordedApproval {
	out := slices.Clone(status)
	for _, a := range spec {
		if !slices.ContainsFunc(out, func(r toolgatev1alpha1.RecordedApproval) bool { return r.User == a.User }) {
			out = append(out, toolgatev1alpha1.RecordedApproval{User: a.User, RecordedAt: now})
		}
	}
	return out
}

// decided is the Decided condition written with phase: True for a person's
// answer (Approved, Denied), False while nobody has answered (Pending) and
// when nobody did (Expired, Cancelled). The reason is the phase.
func decided(phase toolgatev1alpha1.ApprovalPhase, generation int64) metav1.Condition {
	cond := metav1.Condition{
		Type:               toolgatev1alpha1.ApprovalRequestConditionDecided,
		Status:             metav1.ConditionFalse,
		ObservedGeneration: generation,
	}
	switch phase {
	case toolgatev1alpha1.ApprovalApproved:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, toolgatev1alpha1.ApprovalRequestReasonApproved, "a person approved the call; it may run once"
	case toolgatev1alpha1.ApprovalDenied:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, toolgatev1alpha1.ApprovalRequestReasonDenied, "a person denied the call"
	case toolgatev1alpha1.ApprovalExpired:
		cond.Reason, cond.Message = toolgatev1alpha1.ApprovalRequestReasonExpired, "the deadline passed undecided; the call failed closed"
	case toolgatev1alpha1.ApprovalCancelled:
		cond.Reason, cond.Message = toolgatev1alpha1.ApprovalRequestReasonCancelled, "the call settled before anyone decided"
	default:
		cond.Reason, cond.Message = toolgatev1alpha1.ApprovalRequestReasonPending, "waiting for an approver"
	}
	return cond
}

package controller

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/textutil"
)

// Events toolgate emits, only where a person acts on them (metrics count
// the rest; docs/operations.md): each is created once, under a name
// derived from what it reports, so a second manager (or this one after a
// restart) finds it exists and creates nothing.
const (
	// EventSettled (Warning), on a ToolCall that did not succeed: the
	// call's outcome and code. A success has none (the metrics count it).
	EventSettled = "Settled"
	// EventApprovalRequested (Normal), on a ToolCall: a person is asked;
	// the note names the ApprovalRequest to decide.
	EventApprovalRequested = "ApprovalRequested"
	// EventProfileInvalid (Warning), on a ToolProfile: this generation is
	// not Ready; calls of its sessions settle as profile_unavailable.
	EventProfileInvalid = "ProfileInvalid"
	// EventProfileWarnings (Warning), on a ToolProfile: this generation is
	// Ready, but an expression reads a field no schema declares (the
	// schema allows others): likely a typo only a call will reveal.
	EventProfileWarnings = "ProfileWarnings"
)

// reportingController names toolgate in the Events it emits.
const reportingController = "toolgate.dev/manager"

// maxNote is the API server's limit on an Event's note.
const maxNote = 1024

// emit creates the Event named name about regarding, once, with the
// annotations given (nil for none). Events are for people: a failure is
// logged.
func emit(ctx context.Context, c client.Client, now time.Time, regarding corev1.ObjectReference, name, kind, reason, action, note string, annotations map[string]string) bool {
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: regarding.Namespace, Name: name, Annotations: annotations},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: reportingController,
		ReportingInstance:   reportingController,
		Action:              action,
		Reason:              reason,
		Type:                kind,
		Note:                textutil.Truncate(note, maxNote),
		Regarding:           regarding,
	}
	err := c.Create(ctx, ev)
	switch {
	case apierrors.IsAlreadyExists(err):
		return false
	case err != nil:
		log.FromContext(ctx).Error(err, "event not created", "reason", reason)
	}
	return true
}

// regardingCall and regardingProfile name the object an Event is about.
func regardingCall(tc *toolgatev1alpha1.ToolCall) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: toolgatev1alpha1.GroupVersion.String(), Kind: "ToolCall", Namespace: tc.Namespace, Name: tc.Name, UID: tc.UID}
}

func regardingProfile(p *toolgatev1alpha1.ToolProfile) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: toolgatev1alpha1.GroupVersion.String(), Kind: "ToolProfile", Namespace: p.Namespace, Name: p.Name, UID: p.UID}
}

// eventName derives an Event's name from the object it regards and what it
// reports.
func eventName(o metav1.Object, what ...string) string {
	return strings.Join(append([]string{o.GetName(), string(o.GetUID())}, what...), ".")
}

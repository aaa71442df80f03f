package agent

import (
	"context"

	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"go.opentelemetry.io/otel/propagation"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/textutil"
)

// Keys of the MCP _meta objects the gateway reads and writes. A tools/call
// request may carry MetaTurn, MetaIndex, MetaTurnSize and MetaCallID; a
// result carries MetaToolCall, MetaOutcome, MetaCode, MetaCommitSequence and
// MetaContexts; an approval progress notification carries
// MetaApprovalRequest.
const (
	// MetaPrefix begins every key of toolgate's; the gateway refuses a
	// request carrying one it does not read (a misspelt key).
	MetaPrefix = "toolgate.dev/"

	// MetaTurn is the model turn of the call (an integer ≥ 0).
	MetaTurn = "toolgate.dev/turn"
	// MetaIndex is the call's position within its turn (0 … turnSize-1).
	MetaIndex = "toolgate.dev/index"
	// MetaTurnSize is the number of calls of the turn (default 1).
	MetaTurnSize = "toolgate.dev/turnSize"
	// MetaCallID is the model's identifier of the call.
	MetaCallID = "toolgate.dev/callID"

	// MetaToolCall is the name of the ToolCall that carried the call.
	MetaToolCall = "toolgate.dev/toolCall"
	// MetaOutcome is the result's outcome (Succeeded, Failed, Denied,
	// Cancelled, TimedOut).
	MetaOutcome = "toolgate.dev/outcome"
	// MetaCode is the stable error code of a non-success outcome.
	MetaCode = "toolgate.dev/code"
	// MetaCommitSequence is the call's position in the session's log.
	MetaCommitSequence = "toolgate.dev/commitSequence"
	// MetaContexts are the contexts the call deferred to the model's next
	// step (delivered after the whole turn commits).
	MetaContexts = "toolgate.dev/contexts"
	// MetaApprovalRequest names the ApprovalRequest a call waits on.
	MetaApprovalRequest = "toolgate.dev/approvalRequest"
)

// Place is where a call stands in its session's model order.
type Place struct {
	Turn     int64
	Index    int32
	TurnSize int32
	// CallID is the model's identifier of the call (CallID(Turn, Index)
	// when empty).
	CallID string
}

// NewCall is the ToolCall of a session's call at place, as toolgate's
// clients make it: named CallName, holding the stop-work finalizer (so that
// deleting it stops its work first, whether or not the admission policy
// that adds it is installed), its callID defaulted, empty arguments sent as
// {}. requester is the identity making it, the session's owner.
func NewCall(namespace, session string, place Place, tool, args, requester string) *toolgatev1alpha1.ToolCall {
	if args == "" {
		args = "{}"
	}
	if place.CallID == "" {
		place.CallID = CallID(place.Turn, place.Index)
	}
	return &toolgatev1alpha1.ToolCall{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: CallName(session, place.Turn, place.Index), Finalizers: []string{StopWorkFinalizer},
			Labels: placeLabels(session, place.Turn),
		},
		Spec: toolgatev1alpha1.ToolCallSpec{
			SessionRef: toolgatev1alpha1.LocalObjectReference{Name: session},
			Turn:       place.Turn, Index: place.Index, TurnSize: place.TurnSize,
			CallID: place.CallID, Tool: tool, Arguments: args, Requester: requester,
		},
	}
}

// WithTrace gives tc the W3C trace context of ctx's span, if it has one
// (an agent traced with OpenTelemetry): the call's spans join the agent's
// trace.
func WithTrace(ctx context.Context, tc *toolgatev1alpha1.ToolCall) {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	if tp := carrier["traceparent"]; tp != "" {
		if tc.Annotations == nil {
			tc.Annotations = map[string]string{}
		}
		tc.Annotations[toolgatev1alpha1.AnnotationTraceparent] = tp
	}
}

// placeLabels are the labels by which the calls of a session's turn are
// listed (atPlace): the server filters them, not the client.
func placeLabels(session string, turn int64) map[string]string {
	return map[string]string{toolgatev1alpha1.LabelSession: textutil.LabelValue(session), toolgatev1alpha1.LabelTurn: strconv.FormatInt(turn, 10)}
}

// StopWorkFinalizer is toolgate's finalizer on a ToolCall: deleting the
// call stops its work first and still commits its one result. A call is
// created holding it, which saves the manager a write where the admission
// policy that adds it (toolcall-stop-work) is not installed.
const StopWorkFinalizer = toolgatev1alpha1.FinalizerStopWork

// maxNameLength is the longest object name the API server accepts (a DNS
// subdomain).
const maxNameLength = 253

// CallName is the deterministic name of the ToolCall at (turn, index) of a
// session: a resubmitted call finds the one already created instead of
// making a second. A session name too long to fit is cut and completed with
// a digest of the whole, so two sessions never share names.
func CallName(session string, turn int64, index int32) string {
	suffix := fmt.Sprintf("-t%d-i%d", turn, index)
	if len(session)+len(suffix) <= maxNameLength {
		return session + suffix
	}
	sum := sha256.Sum256([]byte(session))
	digest := hex.EncodeToString(sum[:])[:16]
	keep := maxNameLength - len(suffix) - len(digest) - 1
	return session[:keep] + "-" + digest + suffix
}

// CallID is the callID given to a call whose client sent none: unique in
// its session, as (turn, index) is.
func CallID(turn int64, index int32) string {
	return fmt.Sprintf("t%d-i%d", turn, index)
}

package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/providers/approval"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/textutil"
)

// ToolProfileReconciler resolves ToolProfiles: it compiles them and reports
// the resolved profile in status.
type ToolProfileReconciler struct {
	Client    client.Client
	Profiles  *Profiles
	Sandboxes *sandbox.Mounts
	Approvals *approval.Mounts
	Clock     clock.PassiveClock
}

// Reconcile compiles one profile and patches its status once.
func (r *ToolProfileReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	compiled, obj, cerr, err := r.Profiles.Resolve(ctx, req.NamespacedName)
	if err != nil || obj == nil {
		return ctrl.Result{}, err
	}
	base := obj.DeepCopy()
	defer func() {
		if equality.Semantic.DeepEqual(base.Status, obj.Status) {
			return // nothing new: no API write
		}
		if err := patch(ctx, r.Client, obj, base, statusUnlocked); err != nil && retErr == nil {
			retErr = client.IgnoreNotFound(err)
		}
	}()

	st := &obj.Status
	spec := &obj.Spec
	st.PermissionPreset = spec.PermissionPreset
	var recheck bool
	st.Sandbox, recheck = r.resolveSandbox(ctx, spec)
	provider, mounted := r.Approvals.Get(string(spec.Approval.Provider))
	st.Approval = &toolgatev1alpha1.ResolvedApproval{Provider: spec.Approval.Provider, Available: mounted && provider.Available()}

	// Every reconcile stamps the generation it saw, so that Ready=False at
	// the current generation means rejected, not yet seen.
	st.ObservedGeneration = obj.Generation
	cond := metav1.Condition{Type: toolgatev1alpha1.ConditionReady, ObservedGeneration: obj.Generation}
	st.Tools, st.ToolCount = nil, 0
	if compiled != nil {
		st.Tools, st.ToolCount = slices.Clone(compiled.Tools), int32(len(compiled.Tools))
		for i := range st.Tools {
			for j := range spec.Tools {
				if def := &spec.Tools[j]; def.Name == st.Tools[i].Name {
					st.Tools[i].Network, st.Tools[i].EgressHosts = sandbox.Network(def, spec.Sandbox), sandbox.EgressHosts(def)
				}
			}
		}
	}
	var listing bool
	st.MCPServers, listing = r.discover(ctx, obj)
	pinReason, pinMessage, pinWarnings := pinsHold(spec, st.MCPServers)
	if compiled != nil && len(compiled.Unavailable) > 0 {
		// Tools left out of the compiled profile: not Ready, naming them;
		// the others run.
		msgs := make([]string, len(compiled.Unavailable))
		for i, pr := range compiled.Unavailable {
			msgs[i] = pr.Message
		}
		pinReason, pinMessage = compiled.Unavailable[0].Reason, strings.Join(msgs, "; ")
	}
	switch missing, refused := unmountedProviders(spec, r.Sandboxes, r.Approvals), refusedPolicy(spec, r.Sandboxes); {
	case cerr != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, cerr.Reason, cerr.Message
	case missing != "":
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, toolgatev1alpha1.ToolProfileReasonProviderNotMounted, missing
	case refused != "":
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, toolgatev1alpha1.ToolProfileReasonSandboxPolicyRefused, refused
	case pinReason != "":
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, pinReason, textutil.Truncate(pinMessage, maxWarnings)
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, toolgatev1alpha1.ToolProfileReasonResolved, "every schema, expression and template compiled; the providers are mounted"
		if all := append(slices.Clone(compiled.Warnings), pinWarnings...); len(all) > 0 {
			warnings := strings.Join(all, "; ")
			cond.Message += fmt.Sprintf("; warnings (%d): %s", len(all), textutil.Truncate(warnings, maxWarnings))
			emit(ctx, r.Client, r.Clock.Now(), regardingProfile(obj), eventName(obj, fmt.Sprintf("g%d", obj.Generation), "warnings"),
				corev1.EventTypeWarning, EventProfileWarnings, "Compile", warnings, nil)
		}
	}
	if cond.Status != metav1.ConditionTrue && cond.Reason != toolgatev1alpha1.ToolProfileReasonMCPListing {
		log.FromContext(ctx).Info("profile not ready", "reason", cond.Reason)
		emit(ctx, r.Client, r.Clock.Now(), regardingProfile(obj), eventName(obj, fmt.Sprintf("g%d", obj.Generation), "invalid"),
			corev1.EventTypeWarning, EventProfileInvalid, "Compile", cond.Reason+": "+cond.Message, nil)
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	if listing {
		return ctrl.Result{RequeueAfter: listPoll}, nil
	}
	if recheck || slices.ContainsFunc(st.MCPServers, func(s toolgatev1alpha1.DiscoveredMCPServer) bool { return s.Error != "" }) {
		return ctrl.Result{RequeueAfter: recheckEvery}, nil
	}
	if len(st.MCPServers) > 0 {
		return ctrl.Result{RequeueAfter: relistEvery}, nil
	}
	return ctrl.Result{}, nil
}

// unmountedProviders says which of the sandbox and approval providers spec
// selects are not mounted in this manager, or "" when both are. Nil mounts
// are not checked.
func unmountedProviders(spec *toolgatev1alpha1.ToolProfileSpec, sandboxes *sandbox.Mounts, approvals *approval.Mounts) string {
	var missing []string
	if sandboxes != nil {
		if _, ok := sandboxes.Get(string(spec.Sandbox.Provider)); !ok {
			missing = append(missing, "the "+string(spec.Sandbox.Provider)+" sandbox provider is not mounted in this manager; permitted calls fail (sandbox_unavailable) until it is")
		}
	}
	if approvals != nil {
		if _, ok := approvals.Get(string(spec.Approval.Provider)); !ok {
			missing = append(missing, "the "+string(spec.Approval.Provider)+" approval provider is not mounted in this manager; Ask decisions fail closed (approval_unavailable) until it is")
		}
	}
	return strings.Join(missing, "; ")
}

// recheckEvery is how often a profile whose enforcement depends on
// objects not watched (a RuntimeClass) is resolved again.
const recheckEvery = 30 * time.Second

// maxWarnings bounds the warnings the Ready condition's message carries.
const maxWarnings = 4096

// maxEnforcementReason is the API's bound on status.sandbox.enforcementReason.
const maxEnforcementReason = 1024

// SetupWithManager registers the reconciler.
func (r *ToolProfileReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&toolgatev1alpha1.ToolProfile{}).
		WithOptions(controllerOptions(1)).
		Named("toolprofile").
		Complete(conflictsRetried(r))
}

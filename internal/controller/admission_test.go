package controller

import (
	"fmt"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testenv"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// as returns a client acting as user.
func as(user string) client.Client { return asMember(user) }

// asMember returns a client acting as user, a member of groups.
func asMember(user string, groups ...string) client.Client {
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// installAdmission creates the objects of config/admission (of files, when
// given), with the bindings narrowed to namespaces labelled for this spec
// (the policy is cluster-wide; other specs run beside this one).
func installAdmission(label string, files ...string) {
	dir := filepath.Join(testenv.RepoRoot(), "config", "admission")
	if len(files) == 0 {
		files = []string{"approval_policy.yaml", "approver_role.yaml", "toolcall_defaults.yaml"}
	}
	for i, f := range files {
		files[i] = filepath.Join(dir, f)
	}
	objs, err := testenv.ReadObjects(files...)
	Expect(err).NotTo(HaveOccurred())
	for _, u := range objs {
		if u.GetKind() == "ValidatingAdmissionPolicyBinding" || u.GetKind() == "MutatingAdmissionPolicyBinding" {
			Expect(unstructured.SetNestedField(u.Object, map[string]any{
				"namespaceSelector": map[string]any{"matchLabels": map[string]any{label: "true"}},
			}, "spec", "matchResources")).To(Succeed())
		}
		u.SetName(label + "-" + u.GetName())
		if p, found, _ := unstructured.NestedString(u.Object, "spec", "policyName"); found {
			Expect(unstructured.SetNestedField(u.Object, label+"-"+p, "spec", "policyName")).To(Succeed())
		}
		Expect(k8s.Create(ctx, u)).To(Succeed(), u.GetKind())
	}
}

func bind(ns, user, clusterRole string) { bindKind(ns, user, "ClusterRole", clusterRole) }

// bindRole binds the Role role of ns to user.
func bindRole(ns, user, role string) { bindKind(ns, user, "Role", role) }

func bindKind(ns, user, kind, role string) {
	Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: user + "-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	})).To(Succeed())
}

var _ = Describe("admission", Ordered, func() {
	const label = "admission-spec"
	var ns string

	BeforeAll(func() {
		installAdmission(label)
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "admission-", Labels: map[string]string{label: "true"}}}
		Expect(k8s.Create(ctx, n)).To(Succeed())
		ns = n.Name
		// Who may do what: alice approves; bob may edit requests but not
		// approve; the agent submits calls and (wrongly) holds the approver
		// role too, to prove the requester rule does not rest on RBAC.
		editor := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: label + "-editor"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"toolgate.dev"}, Resources: []string{"approvalrequests", "toolcalls"}, Verbs: []string{"get", "list", "create", "update", "patch"}}},
		}
		Expect(k8s.Create(ctx, editor)).To(Succeed())
		bind(ns, "alice", label+"-approver")
		bind(ns, "bob", editor.Name)
		bind(ns, "agent", editor.Name)
		bind(ns, "agent", label+"-approver")
		// The policies are live once the API server has loaded them.
		Eventually(func(g Gomega) {
			c := tu.MakeToolCall(ns, "probe", "s").Requester("someone-else").Obj()
			err := as("agent").Create(ctx, c)
			g.Expect(apierrors.IsInvalid(err) || apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	})

	request := func(name string) *toolgatev1alpha1.ApprovalRequest {
		ar := tu.MakeApprovalRequest(ns, name, name, metav1.NewTime(time.Now().Add(time.Hour))).Obj()
		Expect(k8s.Create(ctx, ar)).To(Succeed())
		return ar
	}
	decideAs := func(user string, ar *toolgatev1alpha1.ApprovalRequest, decidedBy string) error {
		c := as(user)
		got := &toolgatev1alpha1.ApprovalRequest{}
		Expect(c.Get(ctx, client.ObjectKeyFromObject(ar), got)).To(Succeed())
		got.Spec.Decision = got.DecisionOf(toolgatev1alpha1.DecisionApprove, decidedBy, "")
		return c.Update(ctx, got)
	}

	It("gives every new call the stop-work finalizer at its creation (no write by the manager)", func() {
		// The mutating policy is live once the API server has loaded it.
		n := 0
		Eventually(func(g Gomega) {
			n++
			c := tu.MakeToolCall(ns, fmt.Sprintf("finalized-%d", n), "s").Requester("agent").Obj()
			g.Expect(as("agent").Create(ctx, c)).To(Succeed())
			g.Expect(c.Finalizers).To(ConsistOf("toolgate.dev/stop-work"))
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
		// A creator that set it already gets it once.
		c := tu.MakeToolCall(ns, "finalized-by-creator", "s").Requester("agent").Obj()
		c.Finalizers = []string{"toolgate.dev/stop-work"}
		Expect(as("agent").Create(ctx, c)).To(Succeed())
		Expect(c.Finalizers).To(ConsistOf("toolgate.dev/stop-work"))
	})

	It("refuses the requester's own approval", func() {
		err := decideAs("agent", request("own"), "agent")
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("the requester of a call may not decide its approval"))
	})

	It("refuses a user without the approve verb", func() {
		err := decideAs("bob", request("no-verb"), "bob")
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("needs the verb approve"))
	})

	It("refuses a decidedBy that is not the caller", func() {
		err := decideAs("alice", request("spoofed"), "carol")
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("decidedBy must be the user making the decision"))
	})

	It("admits an approver, once", func() {
		ar := request("ok")
		Expect(decideAs("alice", ar, "alice")).To(Succeed())
		got := &toolgatev1alpha1.ApprovalRequest{}
		Expect(as("alice").Get(ctx, client.ObjectKeyFromObject(ar), got)).To(Succeed())
		got.Spec.Decision.Action = toolgatev1alpha1.DecisionDeny
		err := as("alice").Update(ctx, got)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("decision can be set once"))
	})

	It("counts distinct approvals from the approvers a request names, and lets any of them deny", func() {
		for _, u := range []string{"carol", "dave", "erin", "frank"} {
			bind(ns, u, label+"-approver")
		}
		ar := tu.MakeApprovalRequest(ns, "quorum", "quorum", metav1.NewTime(time.Now().Add(time.Hour))).Approvers(2, nil, []string{"reviewers"}).Obj()
		Expect(k8s.Create(ctx, ar)).To(Succeed())
		approve := func(c client.Client, user, message string) error {
			got := &toolgatev1alpha1.ApprovalRequest{}
			Expect(c.Get(ctx, client.ObjectKeyFromObject(ar), got)).To(Succeed())
			got.Spec.Approvals = append(got.Spec.Approvals, got.ApprovalOf(user, message))
			return c.Update(ctx, got)
		}
		refused := func(err error, why string) {
			GinkgoHelper()
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(why))
		}
		refused(approve(asMember("erin", "others"), "erin", ""), "only the approvers this request names")
		refused(approve(asMember("agent", "reviewers"), "agent", ""), "the requester of a call may not approve it")
		refused(approve(asMember("bob", "reviewers"), "bob", ""), "needs the verb approve")
		refused(approve(asMember("carol", "reviewers"), "dave", ""), "added by its approver")
		By("an approval names the question its approver read")
		stale := func(edit func(*toolgatev1alpha1.Approval)) error {
			got := &toolgatev1alpha1.ApprovalRequest{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ar), got)).To(Succeed())
			a := got.ApprovalOf("carol", "")
			edit(&a)
			got.Spec.Approvals = append(got.Spec.Approvals, a)
			return asMember("carol", "reviewers").Update(ctx, got)
		}
		refused(stale(func(a *toolgatev1alpha1.Approval) { a.RequestUID = "a-predecessor" }), "an approval names the question its approver read")
		refused(stale(func(a *toolgatev1alpha1.Approval) { a.Question = "another-seal" }), "an approval names the question its approver read")
		refused(stale(func(a *toolgatev1alpha1.Approval) { *a = toolgatev1alpha1.Approval{User: "carol"} }), "an approval names the question its approver read")
		Expect(approve(asMember("carol", "reviewers"), "carol", "looks right")).To(Succeed())

		By("a member approving twice is counted once, and an approval is never edited")
		refused(approve(asMember("carol", "reviewers"), "carol", "again"), "")
		got := &toolgatev1alpha1.ApprovalRequest{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ar), got)).To(Succeed())
		Expect(got.Spec.Approvals).To(HaveLen(1))
		got.Spec.Approvals[0].Message = "changed my words"
		refused(asMember("carol", "reviewers").Update(ctx, got), "never changed or removed")
		got.Spec.Approvals = nil
		refused(k8s.Update(ctx, got), "never changed or removed")

		By("a decision cannot approve a request that needs two")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ar), got)).To(Succeed())
		got.Spec.Decision = got.DecisionOf(toolgatev1alpha1.DecisionApprove, "dave", "")
		refused(asMember("dave", "reviewers").Update(ctx, got), "needs 2 approvals")

		By("the second member's approval completes it; nobody adds a third")
		Expect(approve(asMember("dave", "reviewers"), "dave", "")).To(Succeed())
		refused(approve(asMember("frank", "reviewers"), "frank", ""), "already has the approvals it needs")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ar), got)).To(Succeed())
		got.Spec.Decision = got.DecisionOf(toolgatev1alpha1.DecisionDeny, "frank", "")
		refused(asMember("frank", "reviewers").Update(ctx, got), "already has the approvals it needs; it is approved")

		By("any named approver may deny; nobody else, and nobody approves after")
		deny := tu.MakeApprovalRequest(ns, "quorum-deny", "quorum-deny", metav1.NewTime(time.Now().Add(time.Hour))).Approvers(2, []string{"erin"}, []string{"reviewers"}).Obj()
		Expect(k8s.Create(ctx, deny)).To(Succeed())
		decide := func(c client.Client, user string) error {
			got := &toolgatev1alpha1.ApprovalRequest{}
			Expect(c.Get(ctx, client.ObjectKeyFromObject(deny), got)).To(Succeed())
			got.Spec.Decision = got.DecisionOf(toolgatev1alpha1.DecisionDeny, user, "not this one")
			return c.Update(ctx, got)
		}
		refused(decide(asMember("alice"), "alice"), "only the approvers this request names")
		Expect(decide(asMember("erin"), "erin")).To(Succeed(), "a user named by name")
		ar = deny
		refused(approve(asMember("carol", "reviewers"), "carol", ""), "the request is decided")
	})

	It("lets only toolgate create an ApprovalRequest: a question planted by a broader role is refused", func() {
		// carol holds a broader role than the shipped ones: she may create
		// requests and approve them.
		broad := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: label + "-broad"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"toolgate.dev"}, Resources: []string{"approvalrequests"}, Verbs: []string{"get", "create", "approve"}}},
		}
		Expect(k8s.Create(ctx, broad)).To(Succeed())
		bind(ns, "carol", broad.Name)
		planted := tu.MakeApprovalRequest(ns, "planted", "planted", metav1.NewTime(time.Now().Add(time.Hour))).Obj()
		planted.Spec.ArgumentsPreview = `{"cmd":"ls -l /tmp"}`
		err := as("carol").Create(ctx, planted)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("only toolgate asks"))
	})

	It("refuses an ApprovalRequest created already decided, whoever creates it", func() {
		ar := tu.MakeApprovalRequest(ns, "predecided", "predecided", metav1.NewTime(time.Now().Add(time.Hour))).Obj()
		// dave may even do what toolgate does (the verb manage), and
		// approve: every other rule would let him decide.
		broadest := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: label + "-broadest"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"toolgate.dev"}, Resources: []string{"approvalrequests"}, Verbs: []string{"get", "create", "approve", "manage"}}},
		}
		Expect(k8s.Create(ctx, broadest)).To(Succeed())
		bind(ns, "dave", broadest.Name)
		ar.Spec.Decision = ar.DecisionOf(toolgatev1alpha1.DecisionApprove, "dave", "")
		// The binding reaches the authorizer within moments: until then
		// RBAC, not the policy, refuses.
		Eventually(func() string {
			err := as("dave").Create(ctx, ar.DeepCopy())
			Expect(err).To(HaveOccurred())
			return err.Error()
		}, 10*time.Second).Should(ContainSubstring("cannot be created with a decision"))
	})

	It("refuses changes to a call's or a request's owner references and finalizers by anyone but toolgate", func() {
		call := tu.MakeToolCall(ns, "owned", "s").Requester("agent").Obj()
		Expect(as("agent").Create(ctx, call)).To(Succeed())
		strip := func(c client.Client, obj client.Object, edit func(client.Object)) error {
			Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
			base := obj.DeepCopyObject().(client.Object)
			edit(obj)
			return c.Patch(ctx, obj, client.MergeFrom(base))
		}
		setOwner := func(o client.Object) {
			o.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "anything", UID: "0000"}})
		}
		for what, edit := range map[string]func(client.Object){
			"owner references": setOwner,
			"finalizers":       func(o client.Object) { o.SetFinalizers([]string{"example.com/hold"}) },
		} {
			err := strip(as("agent"), &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owned"}}, edit)
			Expect(err).To(HaveOccurred(), what)
			Expect(err.Error()).To(ContainSubstring("only toolgate may change"), what)
		}
		ar := request("stripped")
		Expect(controllerutil.SetControllerReference(call, ar, k8s.Scheme())).To(Succeed())
		Expect(k8s.Update(ctx, ar)).To(Succeed(), "toolgate itself (here the cluster admin, who holds every verb) may")
		err := strip(as("alice"), &toolgatev1alpha1.ApprovalRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stripped"}}, func(o client.Object) { o.SetOwnerReferences(nil) })
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("only toolgate may change"))
	})

	It("keeps one agent out of another's session: a session is its creator's, others' calls never enter it, and only the requester cancels", func() {
		agentRole := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: label + "-agent"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"toolgate.dev"}, Resources: []string{"agentsessions", "toolcalls"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
				{APIGroups: []string{"toolgate.dev"}, Resources: []string{"toolprofiles"}, Verbs: []string{"use"}},
			},
		}
		Expect(k8s.Create(ctx, agentRole)).To(Succeed())
		bind(ns, "agent-2", agentRole.Name)
		bind(ns, "agent", agentRole.Name)
		claimed := tu.MakeAgentSession(ns, "claimed", "p").Obj() // owner "agent"
		err := as("agent-2").Create(ctx, claimed)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spec.owner must be the user creating the session"))

		Expect(k8s.Create(ctx, tu.MakeToolProfile(ns, "p").Preset(toolgatev1alpha1.PresetTrusted).Sandbox(func(s *toolgatev1alpha1.SandboxPolicy) {
			s.Provider = toolgatev1alpha1.SandboxProviderProcess
		}).Obj())).To(Succeed())
		Expect(as("agent").Create(ctx, tu.MakeAgentSession(ns, "mine", "p").Obj())).To(Succeed())
		intruder := tu.MakeToolCall(ns, "intruder", "mine").Requester("agent-2").Obj()
		Expect(as("agent-2").Create(ctx, intruder)).To(Succeed(), "the API server cannot see the session; the controller refuses it")
		Eventually(func(g Gomega) {
			got := &toolgatev1alpha1.ToolCall{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(intruder), got)).To(Succeed())
			g.Expect(got.Status.Result).NotTo(BeNil())
			g.Expect(got.Status.Result.ErrorCode).To(Equal("not_session_owner"))
			g.Expect(got.Status.Schedule.CommitSequence).To(BeNil(), "never entered the transcript")
			g.Expect(got.Status.Stages).NotTo(ContainElement(HaveField("Stage", "Execute")))
		}, 20*time.Second).Should(Succeed())

		own := tu.MakeToolCall(ns, "own-call", "mine").Tool("echo", `{"text":"x"}`).Requester("agent").At(0, 0).Obj()
		Expect(as("agent").Create(ctx, own)).To(Succeed())
		got := &toolgatev1alpha1.ToolCall{}
		Expect(as("agent-2").Get(ctx, client.ObjectKeyFromObject(own), got)).To(Succeed())
		base := got.DeepCopy()
		got.Spec.CancelRequested = true
		err = as("agent-2").Patch(ctx, got, client.MergeFrom(base))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("only the call's requester may cancel it"))
	})

	It("lets an agent with the shipped role delete its own session and calls, and nobody else's", func() {
		objs, err := testenv.ReadObjects(filepath.Join(testenv.RepoRoot(), "config", "rbac", "user_roles.yaml"))
		Expect(err).NotTo(HaveOccurred())
		for _, u := range objs {
			if u.GetKind() == "ClusterRole" && u.GetName() == "agent" {
				u.SetName(label + "-shipped-agent")
				Expect(k8s.Create(ctx, u)).To(Succeed())
			}
		}
		bind(ns, "carol", label+"-shipped-agent")
		bind(ns, "dave", label+"-shipped-agent")
		Expect(k8s.Create(ctx, tu.MakeToolProfile(ns, "deletes").Preset(toolgatev1alpha1.PresetTrusted).Sandbox(func(s *toolgatev1alpha1.SandboxPolicy) {
			s.Provider = toolgatev1alpha1.SandboxProviderProcess
		}).Obj())).To(Succeed())
		session := func(user, name string) *toolgatev1alpha1.AgentSession {
			s := tu.MakeAgentSession(ns, name, "deletes").Obj()
			s.Spec.Owner = user
			Expect(as(user).Create(ctx, s)).To(Succeed())
			return s
		}
		call := func(user, name, session string) *toolgatev1alpha1.ToolCall {
			c := tu.MakeToolCall(ns, name, session).Requester(user).Obj()
			Expect(as(user).Create(ctx, c)).To(Succeed())
			return c
		}
		carols, daves := session("carol", "carols"), session("dave", "daves")
		carolsCall, davesCall := call("carol", "carols-call", "carols"), call("dave", "daves-call", "daves")

		err = as("carol").Delete(ctx, daves)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("only the session's owner may delete it"))
		err = as("carol").Delete(ctx, davesCall)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("only the call's requester may delete it"))

		Expect(as("carol").Delete(ctx, carolsCall)).To(Succeed())
		Expect(as("carol").Delete(ctx, carols)).To(Succeed())
		Expect(as("dave").Delete(ctx, davesCall)).To(Succeed())
		// An administrator deletes anyone's.
		Expect(k8s.Delete(ctx, daves)).To(Succeed())
	})

	It("lets a session reach only the profile and the existing claim its creator may use", func() {
		limited := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: label + "-limited"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"toolgate.dev"}, Resources: []string{"agentsessions"}, Verbs: []string{"create"}}},
		}
		Expect(k8s.Create(ctx, limited)).To(Succeed())
		bind(ns, "dora", limited.Name)
		mine := func(name, profile, claim string) *toolgatev1alpha1.AgentSession {
			s := tu.MakeAgentSession(ns, name, profile).Obj()
			s.Spec.Owner = "dora"
			if claim != "" {
				s.Spec.Workspace = &toolgatev1alpha1.WorkspaceSpec{ExistingClaim: claim}
			}
			return s
		}
		err := as("dora").Create(ctx, mine("s1", "powerful", ""))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("using ToolProfile powerful needs the verb use"))

		useRole := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dora-uses"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"toolgate.dev"}, Resources: []string{"toolprofiles"}, ResourceNames: []string{"plain"}, Verbs: []string{"use"}},
				{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, ResourceNames: []string{"dora-ws"}, Verbs: []string{"use"}},
			},
		}
		Expect(k8s.Create(ctx, useRole)).To(Succeed())
		bindRole(ns, "dora", useRole.Name)
		Eventually(func() error { return as("dora").Create(ctx, mine("s2", "plain", "dora-ws")) }, 30*time.Second).Should(Succeed())
		err = as("dora").Create(ctx, mine("s3", "plain", "someone-elses-workspace"))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("mounting PersistentVolumeClaim someone-elses-workspace needs the verb use"))
		Expect(as("dora").Create(ctx, mine("s4", "powerful", ""))).NotTo(Succeed())

		// A claim toolgate would create from a template is dora's to make:
		// 500Ti of the most expensive class is refused to whoever may not
		// create claims (toolgate is no deputy), and admitted once she may.
		big := mine("s5", "plain", "")
		big.Spec.Workspace = &toolgatev1alpha1.WorkspaceSpec{VolumeClaimTemplate: &toolgatev1alpha1.WorkspaceClaimTemplate{
			StorageClassName: ptr.To("premium-ultra-ssd"), Size: resource.MustParse("500Ti")}}
		err = as("dora").Create(ctx, big)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("needs its creator to be allowed to create persistentvolumeclaims"))
		claims := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dora-claims"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"create"}}},
		}
		Expect(k8s.Create(ctx, claims)).To(Succeed())
		bindRole(ns, "dora", claims.Name)
		Eventually(func() error { return as("dora").Create(ctx, big.DeepCopy()) }, 30*time.Second).Should(Succeed())
	})

	It("lets only toolgate label a pod as a tool pod, which its components cache", func() {
		// mallory may create and label pods in the namespace, as the
		// built-in edit role allows (whose rules envtest, without the
		// aggregation controller, leaves empty).
		pods := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: label + "-pods"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "create", "update", "patch"}}},
		}
		Expect(k8s.Create(ctx, pods)).To(Succeed())
		bind(ns, "mallory", pods.Name)
		labelled := func(name string) *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{toolgatev1alpha1.LabelSandbox: "true"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/x"}}}}
		}
		Eventually(func() string {
			err := as("mallory").Create(ctx, labelled("planted"))
			Expect(err).To(HaveOccurred())
			return err.Error()
		}, 30*time.Second, 200*time.Millisecond).Should(ContainSubstring("only toolgate labels a pod toolgate.dev/sandbox"))
		plain := labelled("plain")
		plain.Labels = map[string]string{"app": "mine"}
		Expect(as("mallory").Create(ctx, plain)).To(Succeed(), "a pod without the label is hers to make")
		for _, value := range []string{"true", "false"} {
			patch := client.MergeFrom(plain.DeepCopy())
			plain.Labels[toolgatev1alpha1.LabelSandbox] = value
			err := as("mallory").Patch(ctx, plain, patch)
			Expect(err).To(MatchError(ContainSubstring("only toolgate labels a pod")), "adding the label as %q", value)
			delete(plain.Labels, toolgatev1alpha1.LabelSandbox)
		}
		Expect(k8s.Create(ctx, labelled("toolgates"))).To(Succeed(), "the manager's identity (here the admin's) may")
	})

	It("refuses a ToolCall that claims another requester, and admits an honest one", func() {
		err := as("agent").Create(ctx, tu.MakeToolCall(ns, "forged", "s").Requester("alice").Obj())
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spec.requester must be the user creating the call"))
		Expect(as("agent").Create(ctx, tu.MakeToolCall(ns, "honest", "s").Requester("agent").Obj())).To(Succeed())
		err = as("agent").Create(ctx, tu.MakeToolCall(ns, "nested", "s").Requester("agent").Parent("honest").Obj())
		Expect(err).To(HaveOccurred(), "an agent starting nested calls would bypass barriers, the pool and the log")
		Expect(err.Error()).To(ContainSubstring("only toolgate may create a nested call"))
	})
})

package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	ctrl "sigs.k8s.io/controller-runtime"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testmanager"
	tu "github.com/toolgate/toolgate/internal/testutil"
	"github.com/toolgate/toolgate/pkg/agent"
)

var (
	env          *testenv.Env
	k8s          client.Client
	ctx          = context.Background()
	workspaceDir string
	stop         context.CancelFunc
	managerDone  <-chan error
)

func TestAgent(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(30 * time.Second)
	RunSpecs(t, "Agent client (real kube-apiserver, manager with the process sandbox)")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	env, err = testenv.Start()
	Expect(err).NotTo(HaveOccurred())
	k8s = env.Client
	workspaceDir, err = os.MkdirTemp("", "toolgate-agent-")
	Expect(err).NotTo(HaveOccurred())
	root := testenv.RepoRoot()
	objs, err := testenv.ReadObjects(
		filepath.Join(root, "config", "admission", "approval_policy.yaml"),
		filepath.Join(root, "config", "admission", "approver_role.yaml"),
		filepath.Join(root, "config", "rbac", "user_roles.yaml"))
	Expect(err).NotTo(HaveOccurred())
	for _, u := range objs {
		Expect(k8s.Create(ctx, u)).To(Succeed())
	}
	var sctx context.Context
	sctx, stop = context.WithCancel(ctx)
	managerDone, err = testmanager.Start(sctx, env, workspaceDir)
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if stop != nil {
		stop()
		Expect(<-managerDone).NotTo(HaveOccurred())
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
	_ = os.RemoveAll(workspaceDir)
})

// as returns a REST config acting as user.
func as(user string) *rest.Config {
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return cfg
}

func bind(ns string, subject rbacv1.Subject, clusterRole string) {
	Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: clusterRole + "-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{subject},
	})).To(Succeed())
}

func shTool(name, script string) toolgatev1alpha1.ToolDefinition {
	w := tu.MakeTool(name)
	w.Container.Command = []string{"/bin/sh", "-c", script}
	w.Output = toolgatev1alpha1.OutputDeclaration{Schema: tu.JSON(`{"type":"string"}`), Render: toolgatev1alpha1.RenderSpec{Format: toolgatev1alpha1.RenderText}}
	return w.Obj()
}

var _ = Describe("the agent client", func() {
	var ns, user string
	var c *agent.Client

	BeforeEach(func() {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "agent-"}}
		Expect(k8s.Create(ctx, n)).To(Succeed())
		ns = n.Name
		Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"}})).To(Succeed())
		bind(ns, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "agent"}, "agent")
		bind(ns, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}, "approver")
		user = fmt.Sprintf("system:serviceaccount:%s:agent", ns)
		read := shTool("read", `printf "read %s" "$(cat)"`)
		read.IsConcurrencySafe = "true"
		p := tu.MakeToolProfile(ns, "p").Tools(read, shTool("write", "printf written"), shTool("slow", "sleep 60")).
			Preset(toolgatev1alpha1.PresetTrusted).
			PreRule("ask-writes", toolgatev1alpha1.ActionAsk, "", "write").
			PostRule(toolgatev1alpha1.PostRule{Name: "remind", Tools: []string{"write"}, Action: toolgatev1alpha1.PostAccept, Contexts: []string{"the file changed"}}).
			Sandbox(func(s *toolgatev1alpha1.SandboxPolicy) {
				s.Provider = toolgatev1alpha1.SandboxProviderProcess
				s.Mode = toolgatev1alpha1.SandboxWorkspaceWrite
			}).
			Approval(func(a *toolgatev1alpha1.ApprovalSettings) { a.Provider = toolgatev1alpha1.ApprovalProviderAPIServer }).Obj()
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(func(g Gomega) {
			got := &toolgatev1alpha1.ToolProfile{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), got)).To(Succeed())
			g.Expect(got.Status.Conditions).To(ContainElement(And(HaveField("Type", toolgatev1alpha1.ConditionReady), HaveField("Status", metav1.ConditionTrue))))
		}).Should(Succeed())
		var err error
		c, err = agent.New(ctx, as(user))
		Expect(err).NotTo(HaveOccurred())
		Expect(c.User()).To(Equal(user), "the client acts as its credentials' identity")
	})

	It("opens a session and delivers a turn's results in model order as they commit, then its deferred contexts", func() {
		s, err := c.Open(ctx, ns, "s", agent.SessionOptions{Profile: "p"})
		Expect(err).NotTo(HaveOccurred())
		turn, err := s.Submit(ctx, []agent.Call{
			{Tool: "read", Arguments: json.RawMessage(`{"text":"a"}`)},
			{Tool: "read", Arguments: json.RawMessage(`{"text":"b"}`)},
			{Tool: "write", Arguments: json.RawMessage(`{"text":"c"}`)},
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(turn.Number).To(BeEquivalentTo(0))

		results := make(chan agent.Result, 3)
		errs := make(chan error, 1)
		go func() {
			defer GinkgoRecover()
			for r, err := range turn.Results(ctx) {
				if err != nil {
					errs <- err
					return
				}
				results <- r
			}
			close(results)
		}()
		// The reads arrive while the write still waits for a person.
		var got []agent.Result
		for range 2 {
			var r agent.Result
			Eventually(results, 60*time.Second).Should(Receive(&r))
			got = append(got, r)
		}
		Expect(results).NotTo(Receive())
		ar := &toolgatev1alpha1.ApprovalRequest{}
		Eventually(func() error { return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: turn.Names[2]}, ar) }).Should(Succeed())
		base := ar.DeepCopy()
		ar.Spec.Decision = ar.DecisionOf(toolgatev1alpha1.DecisionApprove, "alice", "")
		alice, err := client.New(as("alice"), client.Options{Scheme: env.Scheme})
		Expect(err).NotTo(HaveOccurred())
		Expect(alice.Patch(ctx, ar, client.MergeFrom(base))).To(Succeed())
		var last agent.Result
		Eventually(results, 60*time.Second).Should(Receive(&last))
		got = append(got, last)
		Eventually(results).Should(BeClosed())
		Expect(errs).NotTo(Receive())

		for i, r := range got {
			Expect(r.Index).To(BeEquivalentTo(i))
			Expect(r.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), r.Message)
			Expect(r.Committed).To(BeTrue())
			Expect(*r.CommitSequence).To(BeEquivalentTo(i))
		}
		Expect(got[0].Content).To(Equal(`read {"text":"a"}`))
		Expect(got[2].Content).To(Equal("written"))

		// Read at once, as an agent does before its model's next step: the
		// session may not have recorded the turn complete yet.
		contexts, err := turn.Contexts(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(contexts).To(ConsistOf(HaveField("AdditionalContext.Message", "the file changed")))
		held, committed, err := s.DeferredContexts(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(committed).To(BeEquivalentTo(0))
		Expect(held).To(Equal(contexts))

		next, err := s.Submit(ctx, []agent.Call{{Tool: "read", Arguments: json.RawMessage(`{"text":"d"}`)}})
		Expect(err).NotTo(HaveOccurred())
		Expect(next.Number).To(BeEquivalentTo(1), "the next turn follows the last")
		res, err := next.Wait(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(res).To(HaveLen(1))
		Expect(res[0].Content).To(Equal(`read {"text":"d"}`))
		contexts, err = next.Contexts(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(contexts).To(BeEmpty(), "turn 1 deferred nothing")
		_, err = turn.Contexts(ctx)
		Expect(err).To(MatchError(agent.ErrContextsReplaced), "turn 0's contexts are gone once turn 1 completed")
	})

	It("completes an interrupted submission without a second call, and refuses a different call in a taken place", func() {
		s, err := c.Open(ctx, ns, "s", agent.SessionOptions{Profile: "p"})
		Expect(err).NotTo(HaveOccurred())
		calls := []agent.Call{{Tool: "read", Arguments: json.RawMessage(`{"text":"a"}`)}, {Tool: "read", Arguments: json.RawMessage(`{"text":"b"}`)}}
		first, err := s.SubmitAt(ctx, 0, calls)
		Expect(err).NotTo(HaveOccurred())
		again, err := s.SubmitAt(ctx, 0, calls)
		Expect(err).NotTo(HaveOccurred())
		Expect(again.Names).To(Equal(first.Names))
		_, err = s.SubmitAt(ctx, 0, []agent.Call{{Tool: "write", Arguments: json.RawMessage(`{"text":"x"}`)}, calls[1]})
		Expect(err).To(MatchError(ContainSubstring("already holds another call")))
		list := &toolgatev1alpha1.ToolCallList{}
		Expect(k8s.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		Expect(list.Items).To(HaveLen(2))
		res, err := first.Wait(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(res).To(HaveLen(2))
	})

	It("awaits one call's result by watch, as the agent, telling of each version seen (AwaitCall, the gateway's wait too)", func() {
		s, err := c.Open(ctx, ns, "s", agent.SessionOptions{Profile: "p"})
		Expect(err).NotTo(HaveOccurred())
		turn, err := s.Submit(ctx, []agent.Call{{Tool: "read", Arguments: json.RawMessage(`{"text":"x"}`)}})
		Expect(err).NotTo(HaveOccurred())
		wc, err := client.NewWithWatch(as(user), client.Options{Scheme: k8s.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		tc := &toolgatev1alpha1.ToolCall{}
		Expect(wc.Get(ctx, client.ObjectKey{Namespace: ns, Name: turn.Names[0]}, tc)).To(Succeed())
		var phases []toolgatev1alpha1.ToolCallPhase
		got, err := agent.AwaitCall(ctx, wc, tc, func(v *toolgatev1alpha1.ToolCall) { phases = append(phases, v.Status.Phase) })
		Expect(err).NotTo(HaveOccurred())
		Expect(got.Final()).To(BeTrue())
		Expect(got.Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))
		Expect(got.Status.Result.Value).To(ContainSubstring(`read {\"text\":\"x\"}`))
		Expect(phases).NotTo(BeEmpty())
		Expect(phases[len(phases)-1]).To(Equal(toolgatev1alpha1.PhaseCommitted))

		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		slow, err := s.Submit(ctx, []agent.Call{{Tool: "slow", Arguments: json.RawMessage(`{"text":"x"}`)}})
		Expect(err).NotTo(HaveOccurred())
		Expect(wc.Get(ctx, client.ObjectKey{Namespace: ns, Name: slow.Names[0]}, tc)).To(Succeed())
		_, err = agent.AwaitCall(short, wc, tc, nil)
		Expect(err).To(MatchError(context.DeadlineExceeded), "a wait ends with its context")
		Expect(slow.Cancel(ctx)).To(Succeed())
	})

	It("cancels a turn: the running call settles as cancelled", func() {
		s, err := c.Open(ctx, ns, "s", agent.SessionOptions{Profile: "p"})
		Expect(err).NotTo(HaveOccurred())
		turn, err := s.Submit(ctx, []agent.Call{{Tool: "slow", Arguments: json.RawMessage(`{"text":"x"}`)}})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			tc := &toolgatev1alpha1.ToolCall{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: turn.Names[0]}, tc)).To(Succeed())
			g.Expect(tc.Status.Phase).To(Equal(toolgatev1alpha1.PhaseRunning))
		}).Should(Succeed())
		Expect(turn.Cancel(ctx)).To(Succeed())
		res, err := turn.Wait(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(res[0].Outcome).To(Equal(toolgatev1alpha1.OutcomeCancelled))
	})

	It("submits past every name another agent squatted, and resumes its turn there", func() {
		s, err := c.Open(ctx, ns, "s", agent.SessionOptions{Profile: "p"})
		Expect(err).NotTo(HaveOccurred())
		// Another agent of the namespace (the shipped agent role) makes a
		// call under each name the session's next 70 turns would use.
		bind(ns, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"}, "agent")
		mallory, err := client.New(as("mallory"), client.Options{Scheme: env.Scheme})
		Expect(err).NotTo(HaveOccurred())
		for turn := range int64(70) {
			for index := range int32(2) {
				squat := agent.NewCall(ns, "s", agent.Place{Turn: turn, Index: index, TurnSize: 2}, "write", `{"text":"squat"}`, "mallory")
				Eventually(func() error { return mallory.Create(ctx, squat) }).Should(Succeed())
			}
		}
		calls := []agent.Call{{Tool: "read", Arguments: json.RawMessage(`{"text":"a"}`)}, {Tool: "read", Arguments: json.RawMessage(`{"text":"b"}`)}}
		turn, err := s.Submit(ctx, calls)
		Expect(err).NotTo(HaveOccurred())
		Expect(turn.Number).To(BeEquivalentTo(0), "a squatted name holds no place in the session")
		Expect(turn.Names).NotTo(ContainElement(agent.CallName("s", 0, 0)))
		again, err := s.SubmitAt(ctx, 0, calls)
		Expect(err).NotTo(HaveOccurred())
		Expect(again.Names).To(Equal(turn.Names), "resumed, the turn finds its calls again")
		res, err := turn.Wait(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(res).To(HaveLen(2))
		for i, r := range res {
			Expect(r.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), r.Message)
			Expect(*r.CommitSequence).To(BeEquivalentTo(i))
		}
		Expect(res[0].Content).To(Equal(`read {"text":"a"}`))
		next, err := s.Submit(ctx, calls[:1])
		Expect(err).NotTo(HaveOccurred())
		Expect(next.Number).To(BeEquivalentTo(1))
	})

	It("attaches only to the identity's own session", func() {
		_, err := c.Open(ctx, ns, "s", agent.SessionOptions{Profile: "p"})
		Expect(err).NotTo(HaveOccurred())
		other, err := agent.New(ctx, as("someone-else"))
		Expect(err).NotTo(HaveOccurred())
		_, err = other.Attach(ctx, ns, "s")
		Expect(err).To(HaveOccurred(), "someone-else may not even read the session")
		bind(ns, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "someone-else"}, "agent")
		Eventually(func() error { _, err := other.Attach(ctx, ns, "s"); return err }).Should(MatchError(agent.ErrNotOwner))
		_, err = c.Attach(ctx, ns, "missing")
		Expect(err).To(HaveOccurred())
		_, err = c.Open(ctx, ns, "missing", agent.SessionOptions{})
		Expect(err).To(MatchError(ContainSubstring("needs a profile")))
	})
})

//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// auditRecord is the audit record with id from the managers' output (every
// replica's, as an operator's log collector would read it), or nil.
func auditRecord(id string) map[string]any {
	out, err := kubectl(userAdmin, "", "-n", systemNamespace, "logs", "-l", "control-plane=controller-manager", "--tail=-1", "--max-log-requests=10")
	Expect(err).NotTo(HaveOccurred())
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, `"kind":"toolgate.dev/audit/v1"`) {
			continue
		}
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) == nil && r["id"] == id {
			return r
		}
	}
	return nil
}

// notifications is the suite's receiver of the e2e sinks.
var notifications *notificationReceiver

// notificationReceiver is the e2e sinks' receiver (hack/local-values.yaml,
// config/local): on the bridge's host address, which the manager's pods
// reach. It keeps every body by path.
type notificationReceiver struct {
	mu     sync.Mutex
	byPath map[string][]map[string]any
}

func startNotificationReceiver() *notificationReceiver {
	r := &notificationReceiver{byPath: map[string][]map[string]any{}}
	ln, err := net.Listen("tcp", "10.244.0.254:18089")
	Expect(err).NotTo(HaveOccurred(), "the e2e notification sinks' port")
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		path := strings.TrimPrefix(req.URL.Path, "/")
		r.byPath[path] = append(r.byPath[path], body)
		r.mu.Unlock()
	})}
	go func() { _ = srv.Serve(ln) }()
	DeferCleanup(func() { _ = srv.Close() })
	return r
}

func (r *notificationReceiver) bodies(path string) []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.byPath[path]...)
}

// kinds are the CloudEvent types received about the request named name.
func (r *notificationReceiver) kinds(path, name string) []string {
	var out []string
	for _, b := range r.bodies(path) {
		if b["subject"] == "approvalrequests/"+name {
			out = append(out, fmt.Sprint(b["type"]))
		}
	}
	return out
}

// quorumProfile asks two members of e2e-reviewers to approve every write.
const quorumProfile = `
apiVersion: toolgate.dev/v1alpha1
kind: ToolProfile
metadata: {name: e2e-quorum}
spec:
  permissionPreset: Restricted
  tools:
    - name: write_note
      description: Print the arguments (a stand-in for a write).
      parameters: {type: object}
      output: {schema: {type: string}, render: {format: Text}}
      container: {image: toolgate.dev/tools:dev, command: [/bin/cat]}
  preExecute:
    - name: writes-need-two
      action: Ask
      approvers: {required: 2, groups: [e2e-reviewers]}
  sandbox: {mode: WorkspaceWrite, provider: Pod, resources: {memory: 64Mi}}
  approval:
    provider: APIServer
    redactArguments: [note]
    notify: [e2e-cloudevents, e2e-slack, e2e-teams]
    relayApprovalMessages: true
`

// Approvers a rule names, counted by the API server's admission and the
// shipped role, decided with the kubectl plugin as each person (the admin
// impersonating them with their groups, as the API server would
// authenticate them).
var _ = Describe("approvals by a quorum of a group", func() {
	It("runs a write once two members approved, counts a member once, refuses a non-member, and gives the model the approvers' and a denial's words", func() {
		receiver := notifications
		ns := newAgentNamespace("quorum")
		ns.Bind("reviewers", "ClusterRole", "toolgate-approver", rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "e2e-reviewers"})
		ns.Bind("outsider", "ClusterRole", "toolgate-approver", userSubject("e2e-outsider"))
		ns.Apply(userAdmin, quorumProfile)
		ns.ProfileReady("e2e-quorum")
		// Retention deletes each call 20 s after its turn is complete: long
		// enough to read it, and the audit record must outlive it.
		ns.OpenSession("q", "e2e-quorum", func(s *toolgatev1alpha1.AgentSession) { s.Spec.TTLSecondsAfterCommit = ptr.To[int32](20) })
		ns.Submit(call{"write", "write_note", `{"note":"two people agree"}`})
		ns.Submit(call{"refused", "write_note", `{"note":"nobody agrees"}`})

		admin := kubeconfig(userAdmin)
		plugin := func(user string, groups []string, args ...string) (string, error) {
			full := []string{"toolgate", "--kubeconfig", admin, "--as", user}
			for _, g := range groups {
				full = append(full, "--as-group", g)
			}
			return kubectl(userAdmin, "", append(append(full, "-n", ns.Name), args...)...)
		}
		reviewers := []string{"e2e-reviewers", "system:authenticated"}
		Eventually(func() error {
			return ns.Admin.Get(ctx, client.ObjectKey{Name: "write"}, &toolgatev1alpha1.ApprovalRequest{})
		}, 60*time.Second).Should(Succeed())

		By("a non-member holding the approver role is refused by the API server")
		_, err := plugin("e2e-outsider", nil, "approve", "write", "--question", ns.Question("write"))
		Expect(err).To(MatchError(ContainSubstring("only the approvers this request names")))

		By("the first member's approval is one of two; the same member again is counted once")
		out, err := plugin("e2e-carol", reviewers, "approve", "write", "--question", ns.Question("write"), "-m", "looks right")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("approved by e2e-carol, 1 of 2 approvals (the message reaches the model"))
		_, err = plugin("e2e-carol", reviewers, "approve", "write", "--question", ns.Question("write"))
		Expect(err).To(HaveOccurred(), "a second approval by the same member")
		out, err = plugin("e2e-dave", reviewers, "pending", "-o", "wide")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(MatchRegexp(`write\s+q\s+write_note\s+demo-agent\s+1/2`))
		Consistently(func() *toolgatev1alpha1.ToolCallResult {
			c := &toolgatev1alpha1.ToolCall{}
			Expect(ns.Admin.Get(ctx, client.ObjectKey{Name: "write"}, c)).To(Succeed())
			return c.Status.Result
		}, 3*time.Second, 500*time.Millisecond).Should(BeNil(), "one approval of two runs nothing")

		By("the second member's approval runs the call")
		out, err = plugin("e2e-dave", reviewers, "approve", "write", "--question", ns.Question("write"))
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("2 of 2 approvals"))
		res := ns.Committed("write").Status.Result
		Expect(res.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), res.Message)
		Expect(res.Contexts).To(Equal([]toolgatev1alpha1.AdditionalContext{{Source: toolgatev1alpha1.ContextSourceApproval,
			Rule: "writes-need-two", Message: "approved by e2e-carol: looks right"}}), "the approvers' words reach the model")
		ar := &toolgatev1alpha1.ApprovalRequest{}
		Expect(ns.Admin.Get(ctx, client.ObjectKey{Name: "write"}, ar)).To(Succeed())
		Expect(ar.Status.Phase).To(Equal(toolgatev1alpha1.ApprovalApproved))
		Expect(ar.Status.Approvals).To(HaveLen(2))

		By("the audit trail keeps who approved the write after retention deleted the call")
		written := ns.Committed("write")
		Eventually(func() bool {
			return apierrors.IsNotFound(ns.Admin.Get(ctx, client.ObjectKey{Name: "write"}, &toolgatev1alpha1.ToolCall{}))
		}, 90*time.Second, time.Second).Should(BeTrue(), "retention deletes the call")
		var record map[string]any
		Eventually(func() bool {
			record = auditRecord(string(written.UID) + "/call")
			return record != nil
		}, 30*time.Second, time.Second).Should(BeTrue(), "the call's record in a manager's audit trail")
		Expect(record).To(HaveKeyWithValue("tool", "write_note"))
		Expect(record).To(HaveKeyWithValue("requester", userAgent))
		Expect(record).To(HaveKeyWithValue("outcome", "Succeeded"))
		Expect(record).To(HaveKeyWithValue("argumentsDigest", ar.Annotations[toolgatev1alpha1.AnnotationArgumentsDigest]))
		Expect(fmt.Sprint(record["approval"])).To(And(ContainSubstring("e2e-carol"), ContainSubstring("e2e-dave"), ContainSubstring("looks right")))
		Expect(record).To(HaveKeyWithValue("argumentsPreview", `{"note":"[redacted]"}`), "the approver's redacted preview")
		Expect(fmt.Sprint(record)).NotTo(ContainSubstring("two people agree"), "no redacted argument in the trail")
		var sent map[string]any
		Eventually(func() map[string]any {
			for _, b := range receiver.bodies("audit") {
				if b["id"] == string(written.UID)+"/call" {
					sent = b
				}
			}
			return sent
		}, 60*time.Second, time.Second).ShouldNot(BeNil(), "the record sent to the install's audit webhook")
		Expect(sent).To(And(HaveKeyWithValue("type", "dev.toolgate.audit.call"), HaveKeyWithValue("specversion", "1.0")))
		Expect(sent["data"]).To(And(HaveKeyWithValue("kind", "toolgate.dev/audit/v1"), HaveKeyWithValue("argumentsDigest", record["argumentsDigest"]),
			HaveKeyWithValue("outcome", "Succeeded")), "the same record as the log's")

		By("each sink the profile names heard that the write waited and was decided, in its own format")
		Eventually(func() []string { return receiver.kinds("cloudevents", "write") }, 60*time.Second).Should(Equal(
			[]string{"dev.toolgate.approval.requested", "dev.toolgate.approval.decided"}))
		var ce map[string]any
		for _, b := range receiver.bodies("cloudevents") {
			if b["subject"] == "approvalrequests/write" && ce == nil {
				ce = b
			}
		}
		Expect(ce).To(HaveKeyWithValue("specversion", "1.0"))
		Expect(ce["data"]).To(And(HaveKeyWithValue("requester", userAgent), HaveKeyWithValue("session", "q"),
			HaveKeyWithValue("argumentsPreview", `{"note":"[redacted]"}`)))
		for _, path := range []string{"slack", "teams"} {
			Eventually(func() int { return len(receiver.bodies(path)) }, 60*time.Second).Should(BeNumerically(">=", 2), path)
			first, _ := json.Marshal(receiver.bodies(path)[0])
			Expect(string(first)).To(And(ContainSubstring("Approval needed: demo-agent wants to run write_note"),
				ContainSubstring("kubectl toolgate approve write -n "+ns.Name)), path)
			Expect(string(first)).NotTo(ContainSubstring("two people agree"), path)
		}
		Expect(receiver.bodies("slack")[0]).To(HaveKey("blocks"))
		Expect(fmt.Sprint(receiver.bodies("teams")[0])).To(ContainSubstring("AdaptiveCard"))

		By("a member's denial decides, and its words reach the model")
		Eventually(func() error {
			return ns.Admin.Get(ctx, client.ObjectKey{Name: "refused"}, &toolgatev1alpha1.ApprovalRequest{})
		}, 60*time.Second).Should(Succeed())
		_, err = plugin("e2e-carol", reviewers, "deny", "refused", "-m", "use the staging bucket instead")
		Expect(err).NotTo(HaveOccurred())
		refused := ns.Committed("refused")
		res = refused.Status.Result
		Expect(res.ErrorCode).To(Equal("approval_rejected"))
		Expect(res.Content).To(ContainSubstring("use the staging bucket instead"))
		Expect(res.Content).NotTo(ContainSubstring("nobody agrees"), "the model's result never repeats the arguments")
		Expect(auditRecord(string(refused.UID)+"/decision")).To(HaveKeyWithValue("approval", HaveKeyWithValue("decision",
			And(HaveKeyWithValue("action", "Deny"), HaveKeyWithValue("decidedBy", "e2e-carol")))), "the denial's record")
	})
})

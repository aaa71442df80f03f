package apicontract

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// table GETs one object as the API server's Table (what kubectl get
// prints): every printer column, wide ones included, with its cells.
func table(resource, ns, name string) (columns []metav1.TableColumnDefinition, cells map[string]any) {
	hc, err := rest.HTTPClientFor(env.Config)
	Expect(err).NotTo(HaveOccurred())
	url := strings.TrimSuffix(env.Config.Host, "/") + "/apis/" + v1.GroupVersion.String() + "/namespaces/" + ns + "/" + resource + "/" + name
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	Expect(resp.StatusCode).To(Equal(http.StatusOK))
	t := &metav1.Table{}
	Expect(json.NewDecoder(resp.Body).Decode(t)).To(Succeed())
	Expect(t.Rows).To(HaveLen(1))
	cells = map[string]any{}
	for i, c := range t.ColumnDefinitions {
		cells[c.Name] = t.Rows[0].Cells[i]
	}
	return t.ColumnDefinitions, cells
}

func column(columns []metav1.TableColumnDefinition, name string) *metav1.TableColumnDefinition {
	for i := range columns {
		if columns[i].Name == name {
			return &columns[i]
		}
	}
	return nil
}

// asUnstructured reads obj back as the API server stores it.
func asUnstructured(obj client.Object, kind string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1.GroupVersion.WithKind(kind))
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), u)).To(Succeed())
	return u
}

var _ = Describe("acronyms in field names", func() {
	It("spell a ToolCall's callID in one case; callId is an unknown field", func() {
		ns := newNamespace()
		tc := tu.MakeToolCall(ns, "c", "s").Obj()
		Expect(k8s.Create(ctx, tc)).To(Succeed())
		spec := asUnstructured(tc, "ToolCall").Object["spec"].(map[string]any)
		Expect(spec).To(HaveKeyWithValue("callID", tc.Spec.CallID))
		Expect(spec).NotTo(HaveKey("callId"))

		old := raw(tu.MakeToolCall(ns, "old", "s").Obj(), "ToolCall", func(s map[string]any) { s["callId"] = "call_old" })
		err := k8s.Create(ctx, old, client.FieldValidation(metav1.FieldValidationStrict))
		Expect(err).To(MatchError(ContainSubstring(`unknown field "spec.callId"`)))
	})

	It("spell a session's deferredContexts[].callID in one case", func() {
		ns := newNamespace()
		s := tu.MakeAgentSession(ns, "s", "p").Obj()
		Expect(k8s.Create(ctx, s)).To(Succeed())
		s.Status.DeferredContexts = []v1.SessionContext{{CallID: "call_1", AdditionalContext: v1.AdditionalContext{Source: v1.ContextSourceTool, Message: "m"}}}
		Expect(k8s.Status().Update(ctx, s)).To(Succeed())
		status := asUnstructured(s, "AgentSession").Object["status"].(map[string]any)
		Expect(status["deferredContexts"]).To(ConsistOf(HaveKeyWithValue("callID", "call_1")))
		Expect(status["deferredContexts"]).NotTo(ContainElement(HaveKey("callId")))
	})
})

var _ = Describe("printer columns", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("show an AgentSession's turn at turn 0 and its committed calls, not its next sequence", func() {
		s := tu.MakeAgentSession(ns, "s", "p").Obj()
		Expect(k8s.Create(ctx, s)).To(Succeed())
		// As setSessionStatus writes it: turn 0, no turn committed yet, two
		// calls of turn 0 committed and a third released.
		s.Status.CurrentTurn, s.Status.CommittedTurn, s.Status.CommittedCalls, s.Status.NextSequence = 0, -1, 2, 3
		Expect(k8s.Status().Update(ctx, s)).To(Succeed())

		status := asUnstructured(s, "AgentSession").Object["status"].(map[string]any)
		Expect(status).To(HaveKeyWithValue("currentTurn", BeEquivalentTo(0)), "currentTurn is always written")
		Expect(status).To(HaveKeyWithValue("committedTurn", BeEquivalentTo(-1)))

		columns, cells := table("agentsessions", ns, "s")
		for _, name := range []string{"Turn", "Committed"} {
			c := column(columns, name)
			Expect(c).NotTo(BeNil(), name)
			Expect(c.Type).To(Equal("integer"), name)
			Expect(c.Priority).To(BeZero(), name)
		}
		Expect(cells["Turn"]).To(BeEquivalentTo(0))
		Expect(cells["Committed"]).To(BeEquivalentTo(2))
	})

	It("show an ApprovalRequest's deadline as a time, not an age", func() {
		deadline := metav1.NewTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		ar := tu.MakeApprovalRequest(ns, "a", "c", deadline).Obj()
		Expect(k8s.Create(ctx, ar)).To(Succeed())
		columns, cells := table("approvalrequests", ns, "a")
		c := column(columns, "Deadline")
		Expect(c).NotTo(BeNil())
		Expect(c.Type).To(Equal("string"))
		Expect(c.Priority).To(BeZero())
		Expect(cells["Deadline"]).To(Equal("2030-01-01T00:00:00.000000Z")) // to the microsecond
		Expect(column(columns, "Age")).NotTo(BeNil())
	})

	It("show nothing of a ToolCall that no controller writes", func() {
		tc := tu.MakeToolCall(ns, "c", "s").Obj()
		Expect(k8s.Create(ctx, tc)).To(Succeed())
		columns, _ := table("toolcalls", ns, "c")
		Expect(column(columns, "Pod")).To(BeNil())

		// status.podName and status.approvalRequestName are gone from the
		// schema: the API server prunes them.
		u := asUnstructured(tc, "ToolCall")
		Expect(unstructured.SetNestedField(u.Object, "pod-1", "status", "podName")).To(Succeed())
		Expect(unstructured.SetNestedField(u.Object, "c", "status", "approvalRequestName")).To(Succeed())
		Expect(unstructured.SetNestedField(u.Object, string(v1.PhasePending), "status", "phase")).To(Succeed())
		Expect(k8s.Status().Update(ctx, u)).To(Succeed())
		status := asUnstructured(tc, "ToolCall").Object["status"].(map[string]any)
		Expect(status).To(HaveKeyWithValue("phase", string(v1.PhasePending)))
		Expect(status).NotTo(HaveKey("podName"))
		Expect(status).NotTo(HaveKey("approvalRequestName"))
	})
})

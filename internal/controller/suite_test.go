package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/toolgate/toolgate/internal/notify"

	"k8s.io/apimachinery/pkg/types"

	"github.com/toolgate/toolgate/internal/audit"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/lifecycle"
	"github.com/toolgate/toolgate/internal/providers/approval"
	approvalapiserver "github.com/toolgate/toolgate/internal/providers/approval/apiserver"
	approvalnone "github.com/toolgate/toolgate/internal/providers/approval/none"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/providers/sandbox/process"
	"github.com/toolgate/toolgate/internal/testenv"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

var (
	env          *testenv.Env
	k8s          client.Client
	ctx          = context.Background()
	workspaceDir string
	runnerPath   string
	stopManager  context.CancelFunc
	managerDone  chan struct{}
)

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	// Eventually bounds liveness, not speed: a loaded machine (CI beside a
	// cluster) must not turn a slow step into a failure.
	SetDefaultEventuallyTimeout(30 * time.Second)
	RunSpecs(t, "Controllers (real kube-apiserver, process sandbox)")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	env, err = testenv.Start()
	Expect(err).NotTo(HaveOccurred())
	k8s = env.Client
	workspaceDir, err = os.MkdirTemp("", "toolgate-ws-")
	Expect(err).NotTo(HaveOccurred())
	// The runner binary, for bodies that make sub-calls ($TOOLGATE_RUNNER).
	runnerPath = filepath.Join(workspaceDir, "toolgate-runner")
	build := exec.Command("go", "build", "-o", runnerPath, "./cmd/toolgate-runner")
	build.Dir = testenv.RepoRoot()
	out, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), string(out))
	startManager(env.Config)
})

var _ = AfterSuite(func() {
	if stopManager != nil {
		stopManager()
		<-managerDone
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
	_ = os.RemoveAll(workspaceDir)
})

// startManager runs the controllers as cmd/manager composes them, with
// cfg's client wrapped when a test needs to interfere.
func startManager(cfg *rest.Config, opts ...func(*ctrl.Options)) {
	o := ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Specs restart the manager in one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		// Calls cached without their bulk, as compose.Cache has it.
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{&toolgatev1alpha1.ToolCall{}: {Transform: StripCachedCall}}},
	}
	for _, f := range opts {
		f(&o)
	}
	mgr, err := ctrl.NewManager(cfg, o)
	Expect(err).NotTo(HaveOccurred())
	Expect(Setup(mgr, composeForTests(mgr))).To(Succeed())
	mctx, cancel := context.WithCancel(ctx)
	stopManager = cancel
	managerDone = make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(managerDone)
		Expect(mgr.Start(mctx)).To(Succeed())
	}()
}

// intercepted makes a manager's client go through funcs.
func intercepted(funcs interceptor.Funcs) func(*ctrl.Options) {
	return func(o *ctrl.Options) {
		o.NewClient = func(cfg *rest.Config, opts client.Options) (client.Client, error) {
			c, err := client.NewWithWatch(cfg, opts)
			if err != nil {
				return nil, err
			}
			return interceptor.NewClient(c, funcs), nil
		}
	}
}

// ownManagers is for an Ordered container whose specs start managers of
// their own: the suite's manager stops first, and a plain one is started
// again after the container.
// suiteKey is the manager's key of every manager the specs start: a
// restarted one reads its predecessor's approval questions.
var suiteKey = []byte("toolgate controller specs' manager key")

func ownManagers() {
	stopRunningManager()
	DeferCleanup(func() {
		stopRunningManager()
		startManager(env.Config)
	})
}

// wrapSandbox wraps the Process sandbox of the managers started next (a
// spec that needs a provider seam the process provider lacks sets it, and
// resets it before its managers stop).
var wrapSandbox = func(p sandbox.Provider) sandbox.Provider { return p }

// defaultRetention is the DefaultRetention of the managers started next
// (a spec sets it, and resets it before its managers stop).
var defaultRetention time.Duration

// notifications is the local HTTP receiver of the suite's notification
// sinks: "team" (named by a profile) and "everyone" (default), by path.
var notifications = newNotificationReceiver()

type notificationReceiver struct {
	*httptest.Server
	mu     sync.Mutex
	events map[string][]map[string]any // by path
}

func newNotificationReceiver() *notificationReceiver {
	r := &notificationReceiver{events: map[string][]map[string]any{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var ev map[string]any
		if err := json.NewDecoder(req.Body).Decode(&ev); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.events[req.URL.Path] = append(r.events[req.URL.Path], ev)
		r.mu.Unlock()
	}))
	return r
}

// of is the types of the events path received about the request named
// name in ns, in order.
func (r *notificationReceiver) of(path, ns, name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, ev := range r.events[path] {
		if ev["subject"] == "approvalrequests/"+name && ev["source"] == "toolgate.dev/namespaces/"+ns {
			out = append(out, fmt.Sprint(ev["type"]))
		}
	}
	return out
}

// auditTrail keeps every audit record the suite's managers write.
var auditTrail = &memoryAudit{}

type memoryAudit struct {
	mu      sync.Mutex
	records []audit.Record
}

func (m *memoryAudit) Write(r audit.Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.records = append(m.records, r)
}

// of is the records about the call with uid.
func (m *memoryAudit) of(uid types.UID) []audit.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []audit.Record
	for _, r := range m.records {
		if r.CallUID == string(uid) {
			out = append(out, r)
		}
	}
	return out
}

// composeForTests mounts the providers the specs use, as cmd/manager
// composes them: approval through the API server (and None), the Process
// sandbox.
func composeForTests(mgr ctrl.Manager) Config {
	scope := lifecycle.NewScope()
	cfg := Config{Approvals: &approval.Mounts{}, Sandboxes: &sandbox.Mounts{}, Wake: NewWake(1024), PollInterval: 500 * time.Millisecond,
		DefaultRetention: defaultRetention, Audit: auditTrail, AuditDigests: approvalapiserver.AuditDigests(suiteKey)}
	ap := approvalapiserver.New(mgr.GetClient(), clock.RealClock{}, suiteKey)
	ap.Audit = auditTrail
	ap.Notifier = notify.New(notify.Config{Sinks: []notify.Sink{
		{Name: "team", Format: notify.FormatCloudEvents, URL: notifications.URL + "/team"},
		{Name: "everyone", Format: notify.FormatCloudEvents, URL: notifications.URL + "/everyone", Default: true},
	}}, logr.Discard())
	Expect(mgr.Add(ap.Notifier)).To(Succeed())
	Expect(cfg.Approvals.Mount(scope, string(toolgatev1alpha1.ApprovalProviderAPIServer), ap)).To(Succeed())
	Expect(cfg.Approvals.Mount(scope, string(toolgatev1alpha1.ApprovalProviderNone), approvalnone.Provider{})).To(Succeed())
	box := process.New(workspaceDir, cfg.Wake.Notify)
	subCalls, err := SubCalls(mgr)
	Expect(err).NotTo(HaveOccurred())
	box.SubCalls, box.RunnerPath = subCalls, runnerPath
	Expect(cfg.Sandboxes.Mount(scope, string(toolgatev1alpha1.SandboxProviderProcess), wrapSandbox(box))).To(Succeed())
	return cfg
}

func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ctrl-"}}
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

// shTool is a container tool run by /bin/sh with an exact script (the
// process provider runs it in the session's workspace directory): it reads
// the arguments on stdin and its stdout is the value.
func shTool(name, script string) *tu.ToolWrapper {
	w := tu.MakeTool(name).Parameters(`{"type":"object"}`)
	w.Container.Command = []string{"/bin/sh", "-c", script}
	w.Output = toolgatev1alpha1.OutputDeclaration{
		Schema: tu.JSON(`{"type":"string"}`),
		Render: toolgatev1alpha1.RenderSpec{Format: toolgatev1alpha1.RenderText},
	}
	return w
}

// processProfile is a profile on the process provider.
func processProfile(ns string, tools ...toolgatev1alpha1.ToolDefinition) *tu.ToolProfileWrapper {
	return tu.MakeToolProfile(ns, "p").Tools(tools...).Sandbox(func(s *toolgatev1alpha1.SandboxPolicy) {
		s.Provider = toolgatev1alpha1.SandboxProviderProcess
		s.Mode = toolgatev1alpha1.SandboxWorkspaceWrite
	})
}

// setup creates the profile and a session "s" using it, and waits for the
// profile to be Ready.
func setup(p *tu.ToolProfileWrapper, edit ...func(*tu.AgentSessionWrapper)) {
	Expect(k8s.Create(ctx, p.Obj())).To(Succeed())
	s := tu.MakeAgentSession(p.Namespace, "s", p.Name)
	for _, e := range edit {
		e(s)
	}
	Expect(k8s.Create(ctx, s.Obj())).To(Succeed())
	Eventually(func(g Gomega) {
		got := &toolgatev1alpha1.ToolProfile{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p.Obj()), got)).To(Succeed())
		g.Expect(readyStatus(got.Status.Conditions)).To(Equal(metav1.ConditionTrue))
	}, 30*time.Second).Should(Succeed()) // a manager just started may still be syncing its caches
}

func readyStatus(conds []metav1.Condition) metav1.ConditionStatus {
	for _, c := range conds {
		if c.Type == toolgatev1alpha1.ConditionReady {
			return c.Status
		}
	}
	return ""
}

// submit creates a call of tool at (turn, index) in session "s"; of
// declares the turn's size (default 1).
func submit(ns, name, tool, args string, turn int64, index int32, of ...int32) *toolgatev1alpha1.ToolCall {
	w := tu.MakeToolCall(ns, name, "s").Tool(tool, args).At(turn, index)
	if len(of) > 0 {
		w.Of(of[0])
	}
	c := w.Obj()
	Expect(k8s.Create(ctx, c)).To(Succeed())
	return c
}

// committedCall waits until the call has committed and returns it.
func committedCall(ns, name string, timeout ...time.Duration) *toolgatev1alpha1.ToolCall {
	wait := 20 * time.Second
	if len(timeout) > 0 {
		wait = timeout[0]
	}
	got := &toolgatev1alpha1.ToolCall{}
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(toolgatev1alpha1.PhaseCommitted), "call %s: %s; schedule %+v; finalizers %v", name, stageTrace(got), got.Status.Schedule, got.Finalizers)
	}, wait, 50*time.Millisecond).Should(Succeed())
	return got
}

// stageTrace renders a call's status.stages as "stage:verdict".
func stageTrace(c *toolgatev1alpha1.ToolCall) string {
	parts := make([]string, len(c.Status.Stages))
	for i, s := range c.Status.Stages {
		parts[i] = s.Stage + ":" + s.Verdict
	}
	return strings.Join(parts, " ")
}

// bodyRuns counts the lines a tool appended to file in the session's
// workspace: how many times bodies ran.
func bodyRuns(ns, file string) int {
	data, err := os.ReadFile(filepath.Join(workspaceDir, ns, "s", file))
	if os.IsNotExist(err) {
		return 0
	}
	Expect(err).NotTo(HaveOccurred())
	return strings.Count(string(data), "\n")
}

func workspaceFile(ns, file string) string {
	data, err := os.ReadFile(filepath.Join(workspaceDir, ns, "s", file))
	if os.IsNotExist(err) {
		return ""
	}
	Expect(err).NotTo(HaveOccurred())
	return string(data)
}

var _ = fmt.Sprintf

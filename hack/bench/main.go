// Command bench measures, side by side on the same cluster, the latency of
// N sequential ToolCalls (submitted → committed, the whole pipeline) on a
// cold pod (a session without warm pods: a container tool with the runner
// injected, the same tool in an image that carries the runner, and a
// built-in tool) and on a warm pod (a session keeping one ready; each
// measured call starts once one is), against N bare pods running the same
// command (created → Succeeded → logs read), and prints p50, p95, the
// ratios, and when each step of a cold call's pod was first seen. It
// checks that every call ran in a pod that served no other call. With
// -gvisor (the default) it measures the bare pod, the cold calls and the
// warm call again under the RuntimeClass "gvisor" (hack/cluster-up.sh), in
// the same rounds, each gVisor call against the gVisor bare pod. It uses
// watches to time, never polling. Run it on the local cluster after
// hack/deploy.sh (make bench).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "admin kubeconfig of the cluster")
	n := flag.Int("n", 10, "samples of each kind")
	ns := flag.String("namespace", "bench", "namespace to use (created)")
	pvDir := flag.String("pv-dir", "/var/tmp/toolgate-cluster/pv/bench", "host directory of the built-in tool's workspace volume (hostPath: every node of the local cluster is on this machine)")
	gvisor := flag.Bool("gvisor", true, "also measure every kind under the RuntimeClass gvisor")
	only := flag.String("only", "", "measure only the kinds whose session name contains this (cold, own-runner, builtin, warm, mcp); bare pods are always measured")
	flag.DurationVar(&settle, "settle", time.Second, "before each measured call or pod: wait until no pod of the namespace is terminating, then this long (an agent's calls come seconds apart; a node still stopping the last pod, or starting the warm pool's replacement, is not what one call costs)")
	otlp := flag.String("otlp", "10.244.0.254:4317", "address to receive the manager's spans on (OTLP/gRPC; the local install exports there), for the warm call's hops; empty: none")
	turn := flag.Int("turn", 16, "calls of the parallel turn timed on one node and on every node side by side (0: none)")
	turnRounds := flag.Int("turn-rounds", 3, "turns of each layout, interleaved")
	flag.Parse()
	if !*gvisor {
		kinds = slices.DeleteFunc(kinds, func(k kind) bool { return k.runtimeClass != "" })
	}
	kinds = slices.DeleteFunc(kinds, func(k kind) bool { return !strings.Contains(k.session, *only) })
	if err := run(*kubeconfig, *ns, *pvDir, *otlp, *n, *turn, *turnRounds); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, ns, pvDir, otlp string, n, turn, turnRounds int) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(toolgatev1alpha1.AddToScheme(scheme))
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := setup(ctx, c, ns, pvDir); err != nil {
		return err
	}
	var received *spans
	if otlp != "" {
		if received, err = receiveSpans(otlp); err != nil {
			fmt.Fprintf(os.Stderr, "bench: no hop profile of warm calls: %v\n", err)
		} else {
			defer received.stop()
		}
	}
	// One unmeasured round warms every path (image and informer caches,
	// and the warm session's first pool).
	runtimes := runtimeClasses()
	for _, rc := range runtimes {
		if _, err := barePod(ctx, c, cs, ns, rc, -1); err != nil {
			return err
		}
	}
	for _, k := range kinds {
		if _, err := toolCall(ctx, c, ns, k, 0, nil); err != nil {
			return err
		}
	}
	// Interleave the kinds so all see the same cluster conditions.
	pods := map[string][]time.Duration{}
	took := make([][]time.Duration, len(kinds))
	steps := make([]map[string][]time.Duration, len(kinds))
	calls := make([][]measured, len(kinds))
	served := map[string]string{}
	server := scrapeServerSide(ctx, cs)
	for i := 1; i <= n; i++ {
		for _, rc := range runtimes {
			if err := quiet(ctx, c, ns); err != nil {
				return err
			}
			d, err := barePod(ctx, c, cs, ns, rc, i)
			if err != nil {
				return err
			}
			pods[rc] = append(pods[rc], d)
		}
		for j, k := range kinds {
			if k.warm {
				if err := waitWarm(ctx, c, ns, k.session); err != nil {
					return err
				}
			} else if steps[j] == nil {
				steps[j] = map[string][]time.Duration{}
			}
			if err := quiet(ctx, c, ns); err != nil {
				return err
			}
			m, err := toolCall(ctx, c, ns, k, i, steps[j])
			if err != nil {
				return err
			}
			if prev, dup := served[m.pod]; dup {
				return fmt.Errorf("pod %s served two calls (%s and %s %d)", m.pod, prev, k.session, i)
			}
			served[m.pod] = fmt.Sprintf("%s %d", k.session, i)
			took[j] = append(took[j], m.took)
			calls[j] = append(calls[j], m)
		}
	}
	fmt.Printf("n=%d sequential (after one unmeasured warm-up of each), same command (/bin/echo), same restricted pod settings\n", n)
	for _, rc := range runtimes {
		fmt.Printf("%-50s p50 %6.0f ms   p95 %6.0f ms\n", "bare pod (create→Succeeded→logs)"+under(rc), ms(pct(pods[rc], 50)), ms(pct(pods[rc], 95)))
	}
	for j, k := range kinds {
		fmt.Printf("%-50s p50 %6.0f ms   p95 %6.0f ms\n", k.label+under(k.runtimeClass), ms(pct(took[j], 50)), ms(pct(took[j], 95)))
	}
	for j, k := range kinds {
		bare := pods[k.runtimeClass]
		fmt.Printf("%-50s p50 %6.2f      p95 %6.2f\n", k.ratio+under(k.runtimeClass), ms(pct(took[j], 50))/ms(pct(bare, 50)), ms(pct(took[j], 95))/ms(pct(bare, 95)))
	}
	fmt.Printf("%d calls, %d distinct pods: every call in a pod that served no other\n", len(kinds)*n, len(served))
	fmt.Println("where a cold call's time goes (p50 of when each step was first seen, from the call's creation):")
	head := fmt.Sprintf("  %-26s", "")
	for _, k := range kinds {
		if !k.warm {
			head += fmt.Sprintf(" %12s", column(k))
		}
	}
	fmt.Println(head)
	for _, step := range coldSteps {
		line, seen := fmt.Sprintf("  %-26s", step), false
		for j, k := range kinds {
			if !k.warm {
				line += fmt.Sprintf(" %12s", p50(steps[j][step]))
				seen = seen || len(steps[j][step]) > 0
			}
		}
		if seen {
			fmt.Println(line)
		}
	}
	if received != nil {
		printWarmHops(received, calls)
	}
	printServerSide(server, scrapeServerSide(ctx, cs))
	if turn > 0 {
		return printTurns(ctx, c, ns, turn, turnRounds)
	}
	return nil
}

// settle is how long the node rests before each measurement (-settle).
var settle time.Duration

// quiet waits until no pod of the namespace is being deleted, then settle.
func quiet(ctx context.Context, c client.Client, ns string) error {
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		list := &corev1.PodList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		if !slices.ContainsFunc(list.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil }) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pods of namespace %s still terminating after two minutes", ns)
		}
	}
	time.Sleep(settle)
	return nil
}

// waitWarm waits until the warm session has a warm pod running (so the
// measured call is a warm one).
func waitWarm(ctx context.Context, c client.Client, ns, session string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		list := &corev1.PodList{}
		if err := c.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{toolgatev1alpha1.LabelWarm: "true", toolgatev1alpha1.LabelSession: session}); err != nil {
			return err
		}
		for _, p := range list.Items {
			if toolgatev1alpha1.WarmWaiting(&p) && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no warm pod became ready")
}

// This run's own sessions (turns restart at 0): without warm pods, one for
// a container tool, one for the same tool in an image that carries the
// runner (runnerPath) and one for a built-in tool; one keeping a warm pod.
var (
	coldSession      = fmt.Sprintf("bench-cold-%d", time.Now().Unix())
	ownRunnerSession = fmt.Sprintf("bench-own-runner-%d", time.Now().Unix())
	builtinSession   = fmt.Sprintf("bench-builtin-%d", time.Now().Unix())
	warmSession      = fmt.Sprintf("bench-warm-%d", time.Now().Unix())
	mcpSession       = fmt.Sprintf("bench-mcp-%d", time.Now().Unix())
	mcpWarmSession   = fmt.Sprintf("bench-mcp-warm-%d", time.Now().Unix())
)

// kind is one kind of measured call: its session, tool and arguments, and
// the RuntimeClass of its pods ("": the node's default runtime, runc).
type kind struct {
	session, tool, arguments string
	warm, builtin            bool
	runtimeClass             string
	// label, ratio and column name it in the printed figures (column: in
	// the table of a cold call's steps).
	label, ratio, column string
}

// kinds are measured, and printed, in this order in each round: each kind
// under runc, then the cold container, cold built-in and warm kinds again
// under gVisor.
var kinds = withGVisor([]kind{
	{session: coldSession, tool: "echo", arguments: `{}`,
		label: "cold ToolCall (create→Committed)", ratio: "ratio cold ToolCall / bare pod", column: "container"},
	{session: ownRunnerSession, tool: "echo-own-runner", arguments: `{}`,
		label: "cold ToolCall, runner in the image", ratio: "ratio cold, runner in image / bare pod", column: "own run."},
	{session: builtinSession, tool: "ls", arguments: `{"path":""}`, builtin: true,
		label: "cold built-in ToolCall (fs.list)", ratio: "ratio cold built-in ToolCall / bare pod", column: "built-in"},
	{session: warmSession, tool: "echo", arguments: `{}`, warm: true,
		label: "warm ToolCall (create→Committed)", ratio: "ratio warm ToolCall / bare pod"},
	// An MCP server's tool, in the same image as echo (the Go SDK's
	// example server, /bin/mcp-everything): the server's start, the
	// session's initialize, the pin checked on its listing, the one
	// tools/call.
	{session: mcpSession, tool: "greet-mcp", arguments: `{"name":"bench"}`,
		label: "cold MCP ToolCall (Go server, pinned)", ratio: "ratio cold MCP ToolCall / bare pod", column: "mcp"},
	{session: mcpWarmSession, tool: "greet-mcp", arguments: `{"name":"bench"}`, warm: true,
		label: "warm MCP ToolCall (Go server, pinned)", ratio: "ratio warm MCP ToolCall / bare pod"},
})

// gvisor is the local cluster's RuntimeClass of gVisor (runsc).
const gvisor = "gvisor"

// withGVisor is base followed by its kinds again under gVisor, in their own
// sessions; the runner in the image is not measured again (the injected
// runner's cold path covers a container tool).
func withGVisor(base []kind) []kind {
	out := slices.Clone(base)
	for _, k := range base {
		if k.session == ownRunnerSession || k.session == mcpSession || k.session == mcpWarmSession {
			continue // the runtime's cost is the container tool's
		}
		k.runtimeClass = gvisor
		k.session = strings.Replace(k.session, "bench-", "bench-"+gvisor+"-", 1)
		out = append(out, k)
	}
	return out
}

// runtimeClasses are the runtimes the kinds use, the default first.
func runtimeClasses() []string {
	rcs := []string{""}
	for _, k := range kinds {
		if !slices.Contains(rcs, k.runtimeClass) {
			rcs = append(rcs, k.runtimeClass)
		}
	}
	return rcs
}

// under names a runtime in a figure's label.
func under(runtimeClass string) string {
	if runtimeClass == "" {
		return ""
	}
	return ", " + runtimeClass
}

// column is a cold kind's column in the table of steps.
func column(k kind) string {
	if k.runtimeClass == "" {
		return k.column
	}
	return k.runtimeClass + " " + k.column
}

// profileOf is the profile of a kind's session: one per runtime.
func profileOf(k kind) string {
	if k.runtimeClass == "" {
		return "bench"
	}
	return "bench-" + k.runtimeClass
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// p50 is the median of a step's sightings, or "-" for a step never seen.
func p50(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f ms", ms(pct(ds, 50)))
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

func setup(ctx context.Context, c client.Client, ns, pvDir string) error {
	_ = c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}})
	// The built-in tool's workspace: a hostPath volume the tool's user may
	// write (the local cluster has one node and no provisioner).
	if err := os.MkdirAll(pvDir, 0o777); err != nil {
		return err
	}
	if err := os.Chmod(pvDir, 0o777); err != nil {
		return err
	}
	pvName := "toolgate-bench-" + ns
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName}, Spec: corev1.PersistentVolumeSpec{
		Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: "",
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: "workspace"},
		PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: pvDir, Type: ptr.To(corev1.HostPathDirectoryOrCreate)}},
	}}
	if err := client.IgnoreAlreadyExists(c.Create(ctx, pv)); err != nil {
		return err
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "workspace"}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To(""), VolumeName: pvName,
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}}
	if err := client.IgnoreAlreadyExists(c.Create(ctx, pvc)); err != nil {
		return err
	}
	tool := toolgatev1alpha1.ToolDefinition{
		Name: "echo", Description: "echo", Parameters: json(`{"type":"object"}`),
		Output:    toolgatev1alpha1.OutputDeclaration{Schema: json(`{"type":"string"}`), Render: toolgatev1alpha1.RenderSpec{Format: toolgatev1alpha1.RenderText}},
		Container: &toolgatev1alpha1.ContainerRuntime{Image: "toolgate.dev/tools:dev", Command: []string{"/bin/echo", "hi"}},
	}
	// The parallel turn's tool: the same, safe to run beside itself (a
	// call not declared so runs alone, in model order).
	parallel := *tool.DeepCopy()
	parallel.Name = "echo-parallel"
	parallel.IsConcurrencySafe = "true"
	own := *tool.DeepCopy()
	own.Name = "echo-own-runner"
	own.Container.RunnerPath = "/toolgate-runner"
	ls := toolgatev1alpha1.ToolDefinition{
		Name: "ls", Description: "list", Parameters: json(`{"type":"object"}`),
		Output:  toolgatev1alpha1.OutputDeclaration{Schema: json(`{}`), Render: toolgatev1alpha1.RenderSpec{Format: toolgatev1alpha1.RenderText}},
		Builtin: &toolgatev1alpha1.BuiltinRuntime{Name: "fs.list"},
	}
	greet := toolgatev1alpha1.ToolDefinition{
		Name: "greet-mcp", Description: "greet", Parameters: json(`{"type":"object","required":["name"],"properties":{"name":{"type":"string"}}}`),
		Output: toolgatev1alpha1.OutputDeclaration{Schema: json(`{"type":"string"}`), Render: toolgatev1alpha1.RenderSpec{Format: toolgatev1alpha1.RenderText}},
		MCP:    &toolgatev1alpha1.MCPToolRuntime{Server: "everything", Tool: "greet"},
	}
	for _, rc := range runtimeClasses() {
		p := &toolgatev1alpha1.ToolProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: profileOf(kind{runtimeClass: rc})}, Spec: toolgatev1alpha1.ToolProfileSpec{
			Tools: []toolgatev1alpha1.ToolDefinition{tool, parallel, own, ls, greet}, PermissionPreset: toolgatev1alpha1.PresetTrusted,
			Sandbox:    toolgatev1alpha1.SandboxPolicy{Provider: toolgatev1alpha1.SandboxProviderPod},
			MCPServers: []toolgatev1alpha1.MCPServer{{Name: "everything", Container: toolgatev1alpha1.ContainerRuntime{Image: "toolgate.dev/tools:dev", Command: []string{"/bin/mcp-everything"}}}},
		}}
		if rc != "" {
			p.Spec.Sandbox.RuntimeClassName = ptr.To(rc)
		}
		if err := applyProfile(ctx, c, p); err != nil {
			return err
		}
		// Pinned as its server lists it, as a profile should be.
		if err := pinMCPTools(ctx, c, p); err != nil {
			return err
		}
	}
	for _, k := range kinds {
		s := &toolgatev1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: k.session},
			Spec: toolgatev1alpha1.AgentSessionSpec{Owner: "admin", ProfileRef: toolgatev1alpha1.LocalObjectReference{Name: profileOf(k)}, WarmPods: ptr.To(int32(0))}}
		if k.warm {
			s.Spec.WarmPods = ptr.To(int32(1))
		}
		if k.builtin {
			s.Spec.Workspace = &toolgatev1alpha1.WorkspaceSpec{ExistingClaim: "workspace"}
		}
		if err := client.IgnoreAlreadyExists(c.Create(ctx, s)); err != nil {
			return err
		}
	}
	return nil
}

// pinMCPTools waits for the profile's MCP servers to be listed and pins
// each of its MCP tools to the digest listed.
func pinMCPTools(ctx context.Context, c client.Client, p *toolgatev1alpha1.ToolProfile) error {
	got := &toolgatev1alpha1.ToolProfile{}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		listed := len(got.Status.MCPServers) == len(got.Spec.MCPServers)
		for _, s := range got.Status.MCPServers {
			if s.Error != "" {
				return fmt.Errorf("toolprofile %s/%s: server %s: %s", p.Namespace, p.Name, s.Name, s.Error)
			}
			listed = listed && s.ListedTime != nil
		}
		if listed {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("toolprofile %s/%s: its MCP servers were not listed within 2 minutes", p.Namespace, p.Name)
		}
	}
	for i := range p.Spec.Tools {
		m := p.Spec.Tools[i].MCP
		if m == nil {
			continue
		}
		for _, s := range got.Status.MCPServers {
			for _, t := range s.Tools {
				if s.Name == m.Server && t.Name == m.ToolName(p.Spec.Tools[i].Name) {
					m.SchemaDigest = t.SchemaDigest
				}
			}
		}
		if m.SchemaDigest == "" {
			return fmt.Errorf("toolprofile %s/%s: server %s lists no tool %s", p.Namespace, p.Name, m.Server, m.ToolName(p.Spec.Tools[i].Name))
		}
	}
	return applyProfile(ctx, c, p)
}

// applyProfile creates the profile, or gives one left by an earlier run
// this run's spec and waits for the change to be taken.
func applyProfile(ctx context.Context, c client.Client, p *toolgatev1alpha1.ToolProfile) error {
	// A profile left by an earlier run takes this run's tools.
	existing := &toolgatev1alpha1.ToolProfile{}
	switch err := c.Get(ctx, client.ObjectKeyFromObject(p), existing); {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, p); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		existing.Spec = p.Spec
		if err := c.Update(ctx, existing); err != nil {
			return err
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(p), existing); err != nil {
				return err
			}
			if existing.Status.ObservedGeneration == existing.Generation {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("toolprofile %s/%s: its change was not taken within a minute", p.Namespace, p.Name)
			}
		}
	}
	return nil
}

func json(s string) apiextensionsv1.JSON { return apiextensionsv1.JSON{Raw: []byte(s)} }

func barePod(ctx context.Context, c client.WithWatch, cs kubernetes.Interface, ns, runtimeClass string, i int) (time.Duration, error) {
	name := fmt.Sprintf("bare-%d-%d", time.Now().UnixNano(), i)
	sc := &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: ptr.To(false), EnableServiceLinks: ptr.To(false),
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{Name: "c", Image: "toolgate.dev/tools:dev", ImagePullPolicy: corev1.PullNever,
			Command: []string{"/bin/echo", "hi"}, SecurityContext: sc}},
	}}
	if runtimeClass != "" {
		pod.Spec.RuntimeClassName = ptr.To(runtimeClass)
	}
	w, err := c.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": name})
	if err != nil {
		return 0, err
	}
	defer w.Stop()
	start := time.Now()
	if err := c.Create(ctx, pod); err != nil {
		return 0, err
	}
	for ev := range w.ResultChan() {
		if p, ok := ev.Object.(*corev1.Pod); ok && p.Name == name && ev.Type != watch.Deleted && p.Status.Phase == corev1.PodSucceeded {
			break
		}
	}
	logs, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).Stream(ctx)
	if err != nil {
		return 0, err
	}
	_, _ = io.ReadAll(logs)
	_ = logs.Close()
	d := time.Since(start)
	_ = c.Delete(ctx, pod)
	return d, nil
}

// toolCall submits one call to session and times it to its commit; it
// returns the UID of the pod that served it, and adds to steps (when not
// nil) when each step of its pod and call was first seen.
func toolCall(ctx context.Context, c client.WithWatch, ns string, k kind, i int, steps map[string][]time.Duration) (measured, error) {
	name := fmt.Sprintf("call-%d-%d", time.Now().UnixNano(), i)
	tc := &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: toolgatev1alpha1.ToolCallSpec{
		SessionRef: toolgatev1alpha1.LocalObjectReference{Name: k.session}, Turn: int64(i), CallID: name, Tool: k.tool,
		Arguments: k.arguments, Requester: "admin",
	}}
	// The namespace's tool pods (a warm pod names its call in its
	// annotations once claimed): only the pods there now are replayed,
	// since a measured call's pod goes with it.
	pw, err := c.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns), client.MatchingLabels{toolgatev1alpha1.LabelSandbox: "true"})
	if err != nil {
		return measured{}, err
	}
	defer pw.Stop()
	// This call only: a watch of the namespace would first replay every
	// call of the earlier rounds, and time that.
	w, err := c.Watch(ctx, &toolgatev1alpha1.ToolCallList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": name})
	if err != nil {
		return measured{}, err
	}
	defer w.Stop()
	start := time.Now()
	if err := c.Create(ctx, tc); err != nil {
		return measured{}, err
	}
	// Each step's first sighting, from the watches (milliseconds, where
	// the objects' own times have whole seconds).
	seen := map[string]time.Duration{}
	stamp := func(step string, ok bool) {
		if _, done := seen[step]; ok && !done {
			seen[step] = time.Since(start)
		}
	}
	uid := ""
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return measured{}, fmt.Errorf("call %s: the watch ended", name)
			}
			t, isCall := ev.Object.(*toolgatev1alpha1.ToolCall)
			if !isCall || t.Name != name {
				continue
			}
			stamp("call running", t.Status.Phase == toolgatev1alpha1.PhaseRunning)
			if !t.Committed() {
				continue
			}
			if t.Status.Result.Outcome != toolgatev1alpha1.OutcomeSucceeded {
				return measured{}, fmt.Errorf("call %s: %s %s", name, t.Status.Result.ErrorCode, t.Status.Result.Message)
			}
			d := time.Since(start)
			if uid == "" {
				return measured{}, fmt.Errorf("call %s: no pod of it was seen", name)
			}
			stamp("committed", true)
			if steps != nil {
				for k, v := range seen {
					steps[k] = append(steps[k], v)
				}
			}
			// Gone once measured, as retention would: the namespace stays
			// the same size round after round.
			_ = c.Delete(ctx, tc)
			return measured{took: d, pod: uid, call: string(tc.UID), start: start}, nil
		case ev, ok := <-pw.ResultChan():
			if !ok {
				return measured{}, fmt.Errorf("call %s: the pod watch ended", name)
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				continue
			}
			if call, _, _ := toolgatev1alpha1.PodCall(p); call != name {
				continue
			}
			uid = string(p.UID)
			stamp("pod seen", true)
			stamp("pod scheduled", p.Spec.NodeName != "")
			for _, st := range p.Status.InitContainerStatuses {
				stamp("init container running", st.State.Running != nil || st.State.Terminated != nil)
				stamp("init container done", st.State.Terminated != nil)
			}
			for _, st := range p.Status.ContainerStatuses {
				stamp("tool container running", st.State.Running != nil || st.State.Terminated != nil)
			}
			stamp("pod IP", p.Status.PodIP != "")
		}
	}
}

// coldSteps are the steps of a cold call, in the order they happen.
var coldSteps = []string{"pod seen", "pod scheduled", "init container running", "init container done", "tool container running", "pod IP", "call running", "committed"}

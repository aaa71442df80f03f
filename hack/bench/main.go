// Command bench measures, side by side on the same cluster, the latency of
// N sequential ToolCalls (submitted → committed, the whole pipeline) on a
// cold pod (a session without warm pods) and on a warm pod (a session
// keeping one ready; each measured call starts once one is), against N bare
// pods running the same command (created → Succeeded → logs read), and
// prints p50, p95 and the ratios. It checks that every call ran in a pod
// that served no other call. It uses watches to time, never polling. Run it
// on the local cluster after hack/deploy.sh (make bench).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
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
	flag.Parse()
	if err := run(*kubeconfig, *ns, *n); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, ns string, n int) error {
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
	if err := setup(ctx, c, ns); err != nil {
		return err
	}
	// One unmeasured round warms every path (image and informer caches,
	// and the warm session's first pool).
	if _, err := barePod(ctx, c, cs, ns, -1); err != nil {
		return err
	}
	for _, s := range []string{coldSession, warmSession} {
		if _, _, err := toolCall(ctx, c, ns, s, 0); err != nil {
			return err
		}
	}
	// Interleave the kinds so all see the same cluster conditions.
	var pods, cold, warm []time.Duration
	served := map[string]string{}
	for i := 1; i <= n; i++ {
		d, err := barePod(ctx, c, cs, ns, i)
		if err != nil {
			return err
		}
		pods = append(pods, d)
		d, uid, err := toolCall(ctx, c, ns, coldSession, i)
		if err != nil {
			return err
		}
		cold = append(cold, d)
		if prev, dup := served[uid]; dup {
			return fmt.Errorf("pod %s served two calls (%s and cold %d)", uid, prev, i)
		}
		served[uid] = fmt.Sprintf("cold %d", i)
		if err := waitWarm(ctx, c, ns); err != nil {
			return err
		}
		d, uid, err = toolCall(ctx, c, ns, warmSession, i)
		if err != nil {
			return err
		}
		warm = append(warm, d)
		if prev, dup := served[uid]; dup {
			return fmt.Errorf("pod %s served two calls (%s and warm %d)", uid, prev, i)
		}
		served[uid] = fmt.Sprintf("warm %d", i)
	}
	p50p, p95p := pct(pods, 50), pct(pods, 95)
	p50c, p95c := pct(cold, 50), pct(cold, 95)
	p50w, p95w := pct(warm, 50), pct(warm, 95)
	fmt.Printf("n=%d sequential (after one unmeasured warm-up of each), same command (/bin/echo), same restricted pod settings\n", n)
	fmt.Printf("%-38s p50 %6.0f ms   p95 %6.0f ms\n", "bare pod (create→Succeeded→logs)", ms(p50p), ms(p95p))
	fmt.Printf("%-38s p50 %6.0f ms   p95 %6.0f ms\n", "cold ToolCall (create→Committed)", ms(p50c), ms(p95c))
	fmt.Printf("%-38s p50 %6.0f ms   p95 %6.0f ms\n", "warm ToolCall (create→Committed)", ms(p50w), ms(p95w))
	fmt.Printf("%-38s p50 %6.2f      p95 %6.2f\n", "ratio cold ToolCall / bare pod", ms(p50c)/ms(p50p), ms(p95c)/ms(p95p))
	fmt.Printf("%-38s p50 %6.2f      p95 %6.2f\n", "ratio warm ToolCall / bare pod", ms(p50w)/ms(p50p), ms(p95w)/ms(p95p))
	fmt.Printf("%d calls, %d distinct pods: every call in a pod that served no other\n", 2*n, len(served))
	return nil
}

// waitWarm waits until the warm session has a warm pod running (so the
// measured call is a warm one).
func waitWarm(ctx context.Context, c client.Client, ns string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		list := &corev1.PodList{}
		if err := c.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{"toolgate.dev/warm": "true", "toolgate.dev/session": warmSession}); err != nil {
			return err
		}
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no warm pod became ready")
}

// This run's own sessions (turns restart at 0): one without warm pods, one
// keeping one ready.
var (
	coldSession = fmt.Sprintf("bench-cold-%d", time.Now().Unix())
	warmSession = fmt.Sprintf("bench-warm-%d", time.Now().Unix())
)

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

func setup(ctx context.Context, c client.Client, ns string) error {
	_ = c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}})
	tool := toolgatev1alpha1.ToolDefinition{
		Name: "echo", Description: "echo", Parameters: json(`{"type":"object"}`),
		Output:    toolgatev1alpha1.OutputDeclaration{Schema: json(`{"type":"string"}`), Render: toolgatev1alpha1.RenderSpec{Format: toolgatev1alpha1.RenderText}},
		Container: &toolgatev1alpha1.ContainerRuntime{Image: "toolgate.dev/tools:dev", Command: []string{"/bin/echo", "hi"}},
	}
	p := &toolgatev1alpha1.ToolProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bench"}, Spec: toolgatev1alpha1.ToolProfileSpec{
		Tools: []toolgatev1alpha1.ToolDefinition{tool}, PermissionPreset: toolgatev1alpha1.PresetTrusted,
		Sandbox: toolgatev1alpha1.SandboxPolicy{Provider: toolgatev1alpha1.SandboxProviderPod},
	}}
	if err := client.IgnoreAlreadyExists(c.Create(ctx, p)); err != nil {
		return err
	}
	for name, warm := range map[string]int32{coldSession: 0, warmSession: 1} {
		s := &toolgatev1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: toolgatev1alpha1.AgentSessionSpec{Owner: "admin", ProfileRef: toolgatev1alpha1.LocalObjectReference{Name: "bench"}, WarmPods: ptr.To(warm)}}
		if err := client.IgnoreAlreadyExists(c.Create(ctx, s)); err != nil {
			return err
		}
	}
	return nil
}

func json(s string) apiextensionsv1.JSON { return apiextensionsv1.JSON{Raw: []byte(s)} }

func barePod(ctx context.Context, c client.WithWatch, cs kubernetes.Interface, ns string, i int) (time.Duration, error) {
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
	w, err := c.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns))
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
// returns the UID of the pod that served it.
func toolCall(ctx context.Context, c client.WithWatch, ns, session string, i int) (time.Duration, string, error) {
	name := fmt.Sprintf("call-%d-%d", time.Now().UnixNano(), i)
	tc := &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: toolgatev1alpha1.ToolCallSpec{
		SessionRef: toolgatev1alpha1.LocalObjectReference{Name: session}, Turn: int64(i), CallID: name, Tool: "echo",
		Arguments: `{}`, Requester: "admin",
	}}
	pw, err := c.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns), client.MatchingLabels{"toolgate.dev/call": name})
	if err != nil {
		return 0, "", err
	}
	defer pw.Stop()
	w, err := c.Watch(ctx, &toolgatev1alpha1.ToolCallList{}, client.InNamespace(ns))
	if err != nil {
		return 0, "", err
	}
	defer w.Stop()
	start := time.Now()
	if err := c.Create(ctx, tc); err != nil {
		return 0, "", err
	}
	for ev := range w.ResultChan() {
		if t, ok := ev.Object.(*toolgatev1alpha1.ToolCall); ok && t.Name == name && t.Status.Phase == toolgatev1alpha1.PhaseCommitted {
			if t.Status.Result.Outcome != toolgatev1alpha1.OutcomeSucceeded {
				return 0, "", fmt.Errorf("call %s: %s %s", name, t.Status.Result.ErrorCode, t.Status.Result.Message)
			}
			break
		}
	}
	d := time.Since(start)
	select {
	case ev := <-pw.ResultChan():
		if p, ok := ev.Object.(*corev1.Pod); ok {
			return d, string(p.UID), nil
		}
	case <-time.After(10 * time.Second):
	}
	return 0, "", fmt.Errorf("call %s: no pod of it was seen", name)
}

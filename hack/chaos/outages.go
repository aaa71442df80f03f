package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Faults that last (o.outage): what a real cluster does for a while.
const (
	// The API server admits one request of toolgate's service accounts at
	// a time and answers the others 429 (API Priority and Fairness: a
	// priority level with no seats of its own, which then admits only
	// when it runs nothing, and rejects rather than queues), as an
	// overloaded API server does.
	faultThrottled = "apiserver-throttled-429"
	// The API server answers every write of toolgate's service accounts
	// with 500 (a failing admission webhook, failurePolicy Fail); reads
	// are served from its cache, as when storage writes fail.
	faultFailing = "apiserver-failing-5xx"
	// The kubelet finds the node short of memory (a memory.available
	// threshold above what is free) and evicts pods, as node pressure does.
	faultPressure = "node-memory-pressure"
	// The node's kubelet and every container of the run's pods die (a
	// node lost), and the kubelet comes back after o.outage, longer than
	// the tool pods' grace.
	faultNodeLost = "node-lost"
)

// toolgateUsers are the usernames of toolgate's service accounts: the
// throttling and failing faults reach them only, not the agents.
const toolgateUsers = "system:serviceaccount:toolgate-system:"

// chaosObject names what a lasting fault creates in the cluster.
const chaosObject = "toolgate-chaos"

// throttle makes the API server reject every request of toolgate's
// service accounts with 429 for o.outage.
func (r *chaos) throttle(ctx context.Context) (string, error) {
	pl := &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: chaosObject},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{
			Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				// No seats of its own and none borrowed: one request at
				// a time, the rest rejected at once.
				NominalConcurrencyShares: ptr.To[int32](0),
				LendablePercent:          ptr.To[int32](0),
				BorrowingLimitPercent:    ptr.To[int32](0),
				LimitResponse:            flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject},
			},
		},
	}
	fs := &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: chaosObject},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: chaosObject},
			// Ahead of every suggested schema but exempt and
			// leader election's (200): this one is meant to win.
			MatchingPrecedence:  150,
			DistinguisherMethod: &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindServiceAccount, ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Namespace: "toolgate-system", Name: "*"}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
					Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, ClusterScope: true, Namespaces: []string{"*"},
				}},
				NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
			}},
		},
	}
	return r.hold(ctx, []client.Object{pl, fs}, "toolgate's requests admitted one at a time, the rest answered 429",
		"apiserver_flowcontrol_rejected_requests_total", `flow_schema="`+chaosObject+`"`)
}

// fail makes the API server answer every write of toolgate's service
// accounts with 500 for o.outage: a webhook no one serves (a port of
// this machine nothing listens on) with failurePolicy Fail.
func (r *chaos) fail(ctx context.Context) (string, error) {
	vw := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: chaosObject},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "fail.chaos.toolgate.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/fail")},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}, Scope: ptr.To(admissionregistrationv1.AllScopes)}}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](1),
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name: "toolgate", Expression: fmt.Sprintf("request.userInfo.username.startsWith(%q)", toolgateUsers),
			}},
		}},
	}
	return r.hold(ctx, []client.Object{vw}, "every write of toolgate's service accounts answered 500",
		"apiserver_admission_webhook_rejection_count", `name="fail.chaos.toolgate.dev"`)
}

// hold creates objs, keeps them o.outage, then deletes them; it reports
// how many of toolgate's requests the API server refused meanwhile (the
// API server's own counter metric, its series matching label): client-go
// retries a 429 by itself, so no single probe tells.
func (r *chaos) hold(ctx context.Context, objs []client.Object, what, metric, label string) (string, error) {
	before := r.apiserverCounter(metric, label)
	for _, o := range objs {
		_ = r.c.Delete(ctx, o) // a run stopped earlier left it
		o.SetResourceVersion("")
		if err := r.c.Create(ctx, o); err != nil {
			return "", err
		}
	}
	time.Sleep(r.o.outage)
	for _, o := range objs {
		_ = r.retry(context.Background(), func() error { return client.IgnoreNotFound(r.c.Delete(context.Background(), o)) })
	}
	refused := r.apiserverCounter(metric, label) - before
	if refused <= 0 {
		return "", fmt.Errorf("%s for %s, but the API server refused none of toolgate's requests (%s)", what, r.o.outage, metric)
	}
	return fmt.Sprintf("%s for %s: the API server refused %.0f of toolgate's requests", what, r.o.outage, refused), nil
}

// apiserverCounter sums the API server's metric series named metric whose
// labels hold label.
func (r *chaos) apiserverCounter(metric, label string) float64 {
	out, err := r.kubectl("get", "--raw", "/metrics")
	if err != nil {
		return 0
	}
	sum := 0.0
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, metric+"{") || !strings.Contains(l, label) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v); err == nil {
			sum += v
		}
	}
	return sum
}

// pressure restarts the kubelet with a memory threshold above what the
// node has free, watches which of the run's pods it evicts, and restarts
// it with its usual configuration after o.outage.
func (r *chaos) pressure(ctx context.Context) (string, error) {
	stop := r.watchEvictions(ctx)
	if _, err := r.restart("kubelet", "TOOLGATE_KUBELET_EVICTION_HARD={memory.available: \"99%\"}"); err != nil {
		stop()
		return "", err
	}
	time.Sleep(r.o.outage)
	back, err := r.restart("kubelet")
	// Evictions the kubelet began before its restart still land.
	time.Sleep(5 * time.Second)
	names := stop()
	return fmt.Sprintf("kubelet under memory pressure for %s, evicted or refused %d of the run's pods (%s); %s", r.o.outage, len(names), strings.Join(names, ","), back), err
}

// watchEvictions marks the calls whose pods the kubelet evicts or refuses
// (the pod Failed with a reason: Evicted under pressure, OutOfmemory at
// admission) until stop, which returns the pods' names.
func (r *chaos) watchEvictions(ctx context.Context) (stop func() []string) {
	wctx, cancel := context.WithCancel(ctx)
	seen := map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for wctx.Err() == nil {
			w, err := r.c.Watch(wctx, &corev1.PodList{}, client.InNamespace(r.ns))
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok || p.Status.Phase != corev1.PodFailed || p.Status.Reason == "" {
					continue
				}
				r.mu.Lock()
				if !seen[p.Name] {
					seen[p.Name] = true
					if c := r.calls[callOf(p)]; c != nil {
						// Evicted under pressure, or refused at admission
						// (OutOfmemory, or Evicted again): the body never
						// started then.
						c.podDeleted, c.podRefused = true, true
					}
				}
				r.mu.Unlock()
			}
			w.Stop()
		}
	}()
	return func() []string {
		cancel()
		<-done
		r.mu.Lock()
		defer r.mu.Unlock()
		var names []string
		for n := range seen {
			names = append(names, n)
		}
		return names
	}
}

// loseNode SIGKILLs the kubelet and every container of the run's pods (a
// node gone with the tool pods on it; the control plane and the manager
// live elsewhere), and brings the kubelet back after o.outage.
func (r *chaos) loseNode(ctx context.Context) (string, error) {
	pid, err := pidFile(r.o.clusterDir, "kubelet")
	if err != nil {
		return "", err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return "", err
	}
	// Every call with a pod now may lose it: the workload asked for that.
	pods := &corev1.PodList{}
	if err := r.c.List(ctx, pods, client.InNamespace(r.ns)); err != nil {
		return "", err
	}
	r.mu.Lock()
	for _, p := range pods.Items {
		if c := r.calls[callOf(&p)]; c != nil {
			// Its pod dies, or its start dies with the kubelet (a
			// container whose creation was cut short: sandbox_unavailable).
			c.podDeleted, c.podRefused = true, true
		}
	}
	r.mu.Unlock()
	killed, err := r.killContainers(ctx)
	if err != nil {
		return "", err
	}
	time.Sleep(r.o.outage)
	back, err := r.restart("kubelet")
	return fmt.Sprintf("kubelet and %d containers of %d pods killed, kubelet away %s; %s", killed, len(pods.Items), r.o.outage, back), err
}

// killContainers SIGKILLs the tasks of every container (pause included)
// of the run's namespace, through containerd.
func (r *chaos) killContainers(ctx context.Context) (int, error) {
	sock := filepath.Join(r.o.clusterDir, "containerd", "containerd.sock")
	ctr := filepath.Join(r.o.clusterDir, "bin", "ctr") // the cluster's own containerd client (hack/build-node.sh)
	out, err := exec.CommandContext(ctx, ctr, "--address", sock, "-n", "k8s.io", "containers", "ls", "-q",
		"labels.\"io.kubernetes.pod.namespace\"=="+r.ns).Output()
	if err != nil {
		return 0, fmt.Errorf("ctr containers ls: %w", err)
	}
	n := 0
	for _, id := range strings.Fields(string(out)) {
		if exec.CommandContext(ctx, ctr, "--address", sock, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id).Run() == nil {
			n++
		}
	}
	return n, nil
}

func pidFile(clusterDir, name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(clusterDir, "pids", name))
	if err != nil {
		return 0, err
	}
	var pid int
	_, err = fmt.Sscanf(strings.TrimSpace(string(b)), "%d", &pid)
	return pid, err
}

// callOf names the call a tool pod serves (PodCall: a claimed warm pod
// names it in its annotations).
func callOf(p *corev1.Pod) string {
	name, _, _ := toolgatev1alpha1.PodCall(p)
	return name
}

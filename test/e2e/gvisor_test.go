//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// gvisorProfile is testdata/profile.yaml's kernel tool and built-in file
// tools in a profile whose tool pods run under the RuntimeClass "gvisor"
// (hack/cluster-up.sh registers runsc with containerd under the handler
// runsc).
const gvisorProfile = `
apiVersion: toolgate.dev/v1alpha1
kind: ToolProfile
metadata:
  name: e2e-gvisor
spec:
  permissionPreset: Restricted
  tools:
    - name: kernel
      description: Say which kernel runs the tool.
      parameters: {type: object}
      output: {schema: {type: string}, render: {format: Text}}
      container: {image: toolgate.dev/tools:dev, command: [/bin/sh, -c, 'cat >/dev/null; cat /proc/version']}
    - name: write_file
      description: Write a workspace file.
      parameters:
        type: object
        properties: {path: {type: string}, content: {type: string}}
        required: [path, content]
      output: {schema: {type: object}, render: {format: JSON}}
      builtin: {name: fs.write}
    - name: read_file
      description: Read a workspace file.
      parameters:
        type: object
        properties: {path: {type: string}}
        required: [path]
      output: {schema: {type: string}, render: {format: Text}}
      builtin: {name: fs.read}
  preExecute:
    - {name: allow, action: Allow}
  sandbox:
    mode: WorkspaceWrite
    provider: Pod
    runtimeClassName: gvisor
    resources: {memory: 64Mi}
`

// gvisorKernel is how gVisor's kernel names itself in /proc/version.
const gvisorKernel = "-gvisor "

var _ = Describe("tool pods under gVisor", func() {
	It("runs container and built-in tools under gVisor, cold and warm, and says so in the profile's status", func() {
		ns := newAgentNamespace("gvisor")
		pods := watchRuntimeClasses(ns)
		// The same tool under runc reads the node's own kernel: the
		// check below tells the two apart.
		ns.Submit(call{"kernel-runc", "kernel", `{}`})
		runc := ns.Committed("kernel-runc").Status.Result
		Expect(runc.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), runc.Message)
		Expect(runc.Content).To(HavePrefix("Linux version "))
		Expect(runc.Content).NotTo(ContainSubstring(gvisorKernel))

		ns.Apply(userAdmin, gvisorProfile)
		ns.ProfileReady("e2e-gvisor")
		ns.OpenSession("g", "e2e-gvisor")

		By("cold: a container tool and a built-in tool, each in a pod of its own")
		ns.Submit(call{"g-cold", "kernel", `{}`})
		cold := ns.Committed("g-cold").Status.Result
		Expect(cold.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), cold.Message)
		Expect(cold.Content).To(ContainSubstring(gvisorKernel))
		ns.Submit(call{"g-write", "write_file", `{"path":"g.txt","content":"written under gVisor"}`})
		Expect(ns.Committed("g-write").Status.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded))

		By("warm: the session keeps a warm pod of each kind, both under runsc")
		var warm []corev1.Pod
		Eventually(func() int {
			warm = ns.WarmPods()
			return len(warm)
		}, 90*time.Second, 200*time.Millisecond).Should(Equal(2), "a warm pod of the container tool and one of the built-ins")
		for i := range warm {
			Expect(warm[i].Spec.RuntimeClassName).To(Equal(ptr.To("gvisor")))
			Expect(containerRuntime(&warm[i])).To(Equal("io.containerd.runsc.v1"), "containerd runs %s under gVisor's shim", warm[i].Name)
		}
		ns.Submit(call{"g-warm", "kernel", `{}`})
		hot := ns.Committed("g-warm").Status
		Expect(hot.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), hot.Result.Message)
		Expect(hot.Result.Content).To(ContainSubstring(gvisorKernel))
		ns.Submit(call{"g-read", "read_file", `{"path":"g.txt"}`})
		read := ns.Committed("g-read").Status
		Expect(read.Result.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), read.Result.Message)
		Expect(read.Result.Content).To(Equal("written under gVisor"))
		var warmNames []string
		for _, p := range warm {
			warmNames = append(warmNames, p.Name)
		}
		Expect(warmNames).To(ConsistOf(hot.Sandbox, read.Sandbox), "the warm calls were handed to the warm pods")

		By("every pod that served a call of the session ran under gVisor")
		for _, c := range []string{"g-cold", "g-write", "g-warm", "g-read"} {
			Expect(pods.of(c)).To(Equal("gvisor"), "the RuntimeClass of %s's pod", c)
		}
		Expect(pods.of("kernel-runc")).To(Equal(""), "the first profile's pods have none")

		By("the profile's status names the runtime, and says every restriction is enforced")
		p := &toolgatev1alpha1.ToolProfile{}
		Expect(ns.Admin.Get(ctx, client.ObjectKey{Name: "e2e-gvisor"}, p)).To(Succeed())
		Expect(p.Status.Sandbox.RuntimeClassName).To(Equal("gvisor"))
		// The local cluster enforces NetworkPolicy (kube-router) and the
		// manager is told so: nothing is left partial.
		Expect(p.Status.Sandbox.Enforcement).To(Equal(toolgatev1alpha1.EnforcementFull), p.Status.Sandbox.EnforcementReason)
	})

	It("fails the calls of a profile naming a RuntimeClass the cluster lacks, naming it, without a pod", func() {
		ns := newAgentNamespace("no-runtime")
		ns.Apply(userAdmin, strings.NewReplacer("name: e2e-gvisor", "name: e2e-no-runtime",
			"runtimeClassName: gvisor", "runtimeClassName: no-such-runtime").Replace(gvisorProfile))
		ns.ProfileReady("e2e-no-runtime")
		ns.OpenSession("nr", "e2e-no-runtime")
		ns.Submit(call{"n-kernel", "kernel", `{}`})
		res := ns.Committed("n-kernel").Status.Result
		Expect(res.Outcome).To(Equal(toolgatev1alpha1.OutcomeFailed))
		Expect(res.ErrorCode).To(Equal("sandbox_unavailable"))
		Expect(res.Message).To(ContainSubstring(`RuntimeClass "no-such-runtime" not found`))
		Expect(ns.PodsOf("n-kernel")).To(BeZero())
	})
})

// runtimeClasses records, from a watch of a namespace's pods, the
// RuntimeClass of the pod that served each call (a cold pod is gone soon
// after its call settles: only a watch sees every one).
type runtimeClasses struct {
	mu    sync.Mutex
	calls map[string]string
}

func (r *runtimeClasses) of(call string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	rc, ok := r.calls[call]
	ExpectWithOffset(1, ok).To(BeTrue(), "a pod served %s", call)
	return rc
}

func watchRuntimeClasses(ns *agentNamespace) *runtimeClasses {
	w, err := clientset.CoreV1().Pods(ns.Name).Watch(ctx, metav1.ListOptions{})
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	r := &runtimeClasses{calls: map[string]string{}}
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				r.see(p)
			}
		}
	}()
	return r
}

func (r *runtimeClasses) see(p *corev1.Pod) {
	c, _, _ := toolgatev1alpha1.PodCall(p)
	if c == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[c] = ptr.Deref(p.Spec.RuntimeClassName, "")
}

// containerRuntime is the runtime containerd runs the pod's first
// container with, as containerd itself records it.
func containerRuntime(pod *corev1.Pod) string {
	ExpectWithOffset(1, pod.Status.ContainerStatuses).NotTo(BeEmpty())
	id := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	// The containerd of the pod's node (hack/node-up.sh: node N is named
	// 10.245.N.2 and keeps its state under nodes/nodeN).
	sock := filepath.Join(clusterDir, "containerd", "containerd.sock")
	if n := nodeNumber(pod.Spec.NodeName); n != "" {
		sock = filepath.Join(clusterDir, "nodes", "node"+n, "containerd", "containerd.sock")
	}
	out, err := exec.CommandContext(ctx, filepath.Join(clusterDir, "bin", "ctr"), "--address", sock,
		"-n", "k8s.io", "containers", "info", id).Output()
	ExpectWithOffset(1, err).NotTo(HaveOccurred(), "ctr containers info %s", id)
	var info struct {
		Runtime struct{ Name string }
	}
	ExpectWithOffset(1, json.Unmarshal(out, &info)).To(Succeed(), fmt.Sprintf("%.300s", out))
	return info.Runtime.Name
}

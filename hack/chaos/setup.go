package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

const profileYAML = `
apiVersion: toolgate.dev/v1alpha1
kind: ToolProfile
metadata: {name: chaos}
spec:
  permissionPreset: Restricted
  tools:
    - {name: exclusive, description: non-idempotent exclusive, parameters: {type: object}, output: {schema: {type: string}, render: {format: Text}},
       container: {image: toolgate.dev/tools:dev, command: [/bin/sh]}, timeoutSeconds: 120}
    - {name: parallel, description: non-idempotent parallel-safe, parameters: {type: object}, output: {schema: {type: string}, render: {format: Text}},
       container: {image: toolgate.dev/tools:dev, command: [/bin/sh]}, isConcurrencySafe: "true", timeoutSeconds: 120}
    - {name: idempotent, description: idempotent parallel-safe, parameters: {type: object}, output: {schema: {type: string}, render: {format: Text}},
       container: {image: toolgate.dev/tools:dev, command: [/bin/sh]}, isConcurrencySafe: "true", idempotent: true, timeoutSeconds: 120}
    - {name: flaky, description: "idempotent, fails its first attempt", parameters: {type: object}, output: {schema: {type: string}, render: {format: Text}},
       container: {image: toolgate.dev/tools:dev, command: [/bin/sh]},
       idempotent: true, retry: {maxAttempts: 3}, timeoutSeconds: 120}
    - {name: asked, description: needs a person, parameters: {type: object}, output: {schema: {type: string}, render: {format: Text}},
       container: {image: toolgate.dev/tools:dev, command: [/bin/sh]}, isConcurrencySafe: "true", timeoutSeconds: 120}
    - {name: overtime, description: outlives its timeout, parameters: {type: object}, output: {schema: {type: string}, render: {format: Text}},
       container: {image: toolgate.dev/tools:dev, command: [/bin/sh]}, isConcurrencySafe: "true", timeoutSeconds: 2}
  preExecute:
    - {name: ask, tools: [asked], action: Ask}
    - {name: allow, action: Allow}
  sandbox: {mode: WorkspaceWrite, provider: Pod, resources: {memory: 64Mi}}
  approval: {provider: APIServer, timeoutSeconds: 600}
`

// scripts are the tools' bodies, after markRun.
var scripts = map[string]string{
	"exclusive":  `sleep 1; echo "$id"`,
	"parallel":   `sleep 2; echo "$id"`,
	"idempotent": `echo "$id"`,
	"flaky":      `if [ ! -e "$TOOLGATE_WORKSPACE/runs/$id.first" ]; then : > "$TOOLGATE_WORKSPACE/runs/$id.first"; exit 1; fi; echo "$id"`,
	"asked":      `echo "$id"`,
	"overtime":   `sleep 8; echo "$id"`,
}

// markRun reads the call's id from its arguments and appends a line to
// runs/<id> in the workspace: a body run counted, not guessed.
const markRun = `id=$(sed -n 's/.*"id":"\([^"]*\)".*/\1/p'); echo run >> "$TOOLGATE_WORKSPACE/runs/$id";`

// nonIdempotent are the tools whose bodies must never run twice.
var nonIdempotent = map[string]bool{"exclusive": true, "parallel": true, "asked": true, "overtime": true}

func (r *chaos) setup(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	if err := r.c.Create(ctx, ns); err != nil {
		return err
	}
	p := &toolgatev1alpha1.ToolProfile{}
	if err := yaml.UnmarshalStrict([]byte(profileYAML), p); err != nil {
		return fmt.Errorf("the profile: %w", err)
	}
	p.Namespace = r.ns
	for i := range p.Spec.Tools {
		t := &p.Spec.Tools[i]
		t.Container.Command = []string{"/bin/sh", "-c", markRun + " " + scripts[t.Name]}
	}
	if err := r.c.Create(ctx, p); err != nil {
		return err
	}
	if err := r.waitFor(ctx, 60*time.Second, func() bool {
		got := &toolgatev1alpha1.ToolProfile{}
		if r.c.Get(ctx, client.ObjectKeyFromObject(p), got) != nil {
			return false
		}
		for _, c := range got.Status.Conditions {
			if c.Type == "Ready" && c.Status == metav1.ConditionTrue {
				return true
			}
		}
		return false
	}); err != nil {
		return fmt.Errorf("the profile is not Ready: %w", err)
	}
	for s := range r.o.sessions {
		name := fmt.Sprintf("s%d", s)
		dir := filepath.Join(r.o.clusterDir, "pv", r.ns, name)
		if err := os.MkdirAll(filepath.Join(dir, "runs"), 0o777); err != nil {
			return err
		}
		for _, d := range []string{dir, filepath.Join(dir, "runs")} {
			if err := os.Chmod(d, 0o777); err != nil {
				return err
			}
		}
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: r.ns + "-" + name}, Spec: corev1.PersistentVolumeSpec{
			Capacity: corev1.ResourceList{corev1.ResourceStorage: mustQuantity("1Gi")}, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: "", ClaimRef: &corev1.ObjectReference{Namespace: r.ns, Name: name},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
		}}
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: new(string), VolumeName: pv.Name,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: mustQuantity("1Gi")}},
		}}
		for _, o := range []client.Object{pv, pvc} {
			if err := r.c.Create(ctx, o); err != nil {
				return err
			}
		}
		session := &toolgatev1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name}, Spec: toolgatev1alpha1.AgentSessionSpec{
			Owner: "admin", ProfileRef: toolgatev1alpha1.LocalObjectReference{Name: "chaos"}, MaxParallel: 4,
			Workspace: &toolgatev1alpha1.WorkspaceSpec{ExistingClaim: name},
		}}
		if err := r.c.Create(ctx, session); err != nil {
			return err
		}
	}
	return nil
}

// scale sets the manager's replicas and waits until as many run.
func (r *chaos) scale(ctx context.Context, n int32) error {
	if _, err := r.kubectl("-n", "toolgate-system", "scale", "deployment/toolgate-controller-manager", fmt.Sprintf("--replicas=%d", n)); err != nil {
		return err
	}
	_, err := r.kubectl("-n", "toolgate-system", "rollout", "status", "deployment/toolgate-controller-manager", "--timeout=180s")
	return err
}

func (r *chaos) kubectl(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(envOr("K8S_BIN", r.k8sBin()), "kubectl"), append([]string{"--kubeconfig", filepath.Join(r.o.clusterDir, "kubeconfig", "admin.kubeconfig")}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (r *chaos) k8sBin() string {
	out, err := exec.Command("bash", "-c", "source hack/cluster-env.sh && echo $K8S_BIN").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

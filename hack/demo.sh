#!/usr/bin/env bash
# The one-command demo: a real single-node cluster, toolgate installed in
# it, a ToolProfile and an AgentSession, and two model turns of tool calls
# submitted by the identity "demo-agent". One call needs approval; the
# separate identity "demo-approver" approves it with kubectl. Prints the
# committed transcript in model order. `make demo-down` removes everything.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/hack/cluster-env.sh"
cd "$root"
ns=demo
as_agent() { "$K8S_BIN/kubectl" --kubeconfig "$CLUSTER_DIR/kubeconfig/demo-agent.kubeconfig" -n "$ns" "$@"; }
as_approver() { "$K8S_BIN/kubectl" --kubeconfig "$CLUSTER_DIR/kubeconfig/demo-approver.kubeconfig" -n "$ns" "$@"; }
# kubectl finds the plugin (kubectl-toolgate) on PATH.
plugin_as() { local user=$1; shift; PATH="$root/_output/bin:$PATH" "$K8S_BIN/kubectl" toolgate --kubeconfig "$CLUSTER_DIR/kubeconfig/$user.kubeconfig" -n "$ns" "$@"; }
say() { printf '\n== %s\n' "$*"; }

say "cluster (first run builds Kubernetes from source: about 15 minutes on 2 cores)"
hack/cluster-up.sh
hack/images.sh

say "toolgate"
hack/deploy.sh

say "namespace $ns: Pod Security restricted; demo-agent submits, demo-approver approves"
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata:
  name: $ns
  labels: {pod-security.kubernetes.io/enforce: restricted}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: demo-agent, namespace: $ns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: toolgate-agent}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: demo-agent}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: demo-approver, namespace: $ns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: toolgate-approver}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: demo-approver}]
---
# The workspace claim the demo session mounts: demo-agent may use it.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: demo-workspace-user, namespace: $ns}
rules: [{apiGroups: [""], resources: [persistentvolumeclaims], resourceNames: [demo-workspace], verbs: [use]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: demo-workspace-user, namespace: $ns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: demo-workspace-user}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: demo-agent}]
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: demo-workspace}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Delete
  storageClassName: ""
  claimRef: {namespace: $ns, name: demo-workspace}
  hostPath: {path: $CLUSTER_DIR/pv/demo, type: DirectoryOrCreate}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: demo-workspace, namespace: $ns}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  volumeName: demo-workspace
  resources: {requests: {storage: 1Gi}}
YAML
mkdir -p "$CLUSTER_DIR/pv/demo" && chmod 0777 "$CLUSTER_DIR/pv/demo"
echo "# Notes" >"$CLUSTER_DIR/pv/demo/README.md" && chmod 0666 "$CLUSTER_DIR/pv/demo/README.md"

say "profile and session"
kubectl -n "$ns" apply -f config/samples/toolgate_v1alpha1_toolprofile.yaml >/dev/null
kubectl -n "$ns" wait --for=condition=Ready toolprofile/workspace-tools --timeout=60s >/dev/null
kubectl -n "$ns" get toolprofile workspace-tools -o wide
as_agent apply -f - >/dev/null <<YAML
apiVersion: toolgate.dev/v1alpha1
kind: AgentSession
metadata: {name: demo}
spec:
  owner: demo-agent
  profileRef: {name: workspace-tools}
  workspace: {existingClaim: demo-workspace}
  maxParallel: 4
YAML

call() { # name turn index turnSize tool arguments
  as_agent apply -f - >/dev/null <<YAML
apiVersion: toolgate.dev/v1alpha1
kind: ToolCall
metadata: {name: $1}
spec:
  sessionRef: {name: demo}
  turn: $2
  index: $3
  turnSize: $4
  callID: call_$1
  tool: $5
  arguments: '$6'
  requester: demo-agent
YAML
}
say "turn 0: the model writes a file (needs approval) and lists the workspace"
call t0-write 0 0 2 write_file '{"path":"notes.md","content":"toolgate ran this write after a person approved it"}'
call t0-list 0 1 2 list_files '{"path":""}'
until as_approver get approvalrequest t0-write >/dev/null 2>&1; do sleep 0.2; done
as_approver get approvalrequest t0-write -o custom-columns=CALL:.spec.toolCallRef.name,TOOL:.spec.tool,REASON:.spec.reason,PREVIEW:.spec.argumentsPreview
say "demo-agent tries to approve its own call and is refused; demo-approver approves (kubectl toolgate approve)"
plugin_as demo-agent approve t0-write 2>&1 | sed 's/^/  refused: /' || true
plugin_as demo-approver approve t0-write -m "fine"

say "turn 1: three parallel reads; a dotfile read the guard denies"
call t1-read 1 0 4 read_file '{"path":"notes.md"}'
call t1-count 1 1 4 word_count '{"text":"how many words are in this sentence"}'
call t1-list 1 2 4 list_files '{"path":""}'
call t1-secret 1 3 4 read_file '{"path":".ssh/id_rsa"}'

for c in t0-write t0-list t1-read t1-count t1-list t1-secret; do
  kubectl -n "$ns" wait --for=condition=Committed "toolcall/$c" --timeout=180s >/dev/null
done

say "committed transcript (model order): kubectl toolgate transcript demo"
plugin_as demo-agent transcript demo
as_agent get toolcalls --sort-by=.status.schedule.commitSequence \
  -o custom-columns='NAME:.metadata.name,SEQ:.status.schedule.commitSequence,MODE:.status.schedule.executionMode,OUTCOME:.status.result.outcome,CODE:.status.result.errorCode'
say "why was t1-secret refused? kubectl toolgate trace t1-secret"
plugin_as demo-agent trace t1-secret
say "session"
as_agent get agentsession demo -o jsonpath='{"committed: "}{.status.committedCalls}{"  succeeded: "}{.status.counts.succeeded}{"  denied: "}{.status.counts.denied}{"  contexts for the next step: "}{.status.deferredContexts}{"\n"}'

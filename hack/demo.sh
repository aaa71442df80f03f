#!/usr/bin/env bash
# The one-command demo: a real single-node cluster, toolgate installed in
# it, a ToolProfile, and an agent written with pkg/agent (hack/demoagent)
# that opens an AgentSession and submits two model turns of tool calls as
# the identity "demo-agent", printing results in model order as they
# commit. One call needs approval; the separate identity "demo-approver"
# approves it with kubectl. Prints the committed transcript in model order. `make demo-down` removes everything.
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

say "traces: Jaeger (built from source) receives every call's spans (hack/jaeger.yaml)"
jaeger=$(hack/build-jaeger.sh | tail -n1)
(
  # shellcheck source=hack/cluster-lib.sh
  source "$root/hack/cluster-lib.sh"
  STATE=$CLUSTER_DIR
  start jaeger "$jaeger" --config "$root/hack/jaeger.yaml"
  wait_for "Jaeger's query API" curl -fsS http://127.0.0.1:16686/api/services
)

say "toolgate, and its MCP gateway (config/local-gateway)"
hack/deploy.sh
kubectl kustomize config/local-gateway | kubectl apply --server-side --force-conflicts -f - >/dev/null
kubectl -n toolgate-system rollout status deployment/toolgate-gateway --timeout=180s >/dev/null

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
# An agent that speaks MCP: the gateway accepts ServiceAccount tokens and
# acts as their ServiceAccount here.
apiVersion: v1
kind: ServiceAccount
metadata: {name: mcp-agent, namespace: $ns}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: mcp-agent, namespace: $ns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: toolgate-agent}
subjects: [{kind: ServiceAccount, name: mcp-agent, namespace: $ns}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: toolgate-gateway-impersonator, namespace: $ns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: toolgate-gateway-impersonator}
subjects: [{kind: ServiceAccount, name: toolgate-gateway, namespace: toolgate-system}]
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
# A previous run's session goes first, with its calls (its finalizer
# settles them; they are its own): the agent's turns start again at 0.
if kubectl -n "$ns" get agentsession demo >/dev/null 2>&1; then
  echo "removing the previous run's session demo and its calls"
  kubectl -n "$ns" delete agentsession demo --wait --timeout=120s >/dev/null
  kubectl -n "$ns" wait --for=delete toolcall --all --timeout=120s >/dev/null 2>&1 || true
fi
kubectl -n "$ns" apply -f config/samples/toolgate_v1alpha1_toolprofile.yaml >/dev/null
# The local cluster has gVisor (RuntimeClass gvisor) and enforces
# NetworkPolicy (kube-router): the sample's tools run there fully enforced.
kubectl -n "$ns" patch toolprofile workspace-tools --type merge -p '{"spec":{"sandbox":{"runtimeClassName":"gvisor"}}}' >/dev/null
kubectl -n "$ns" wait --for=condition=Ready toolprofile/workspace-tools --timeout=60s >/dev/null
kubectl -n "$ns" get toolprofile workspace-tools -o wide
enforcement=$(kubectl -n "$ns" get toolprofile workspace-tools -o jsonpath='{.status.sandbox.enforcement}')
if [ "$enforcement" != Full ]; then
  echo "demo: the profile's sandbox is $enforcement on the local cluster, not Full: $(kubectl -n "$ns" get toolprofile workspace-tools -o jsonpath='{.status.sandbox.enforcementReason}')" >&2
  exit 1
fi
say "the agent (hack/demoagent, on pkg/agent) opens session demo and submits two turns as demo-agent"
go build -o _output/bin/demoagent ./hack/demoagent
agent_log=$CLUSTER_DIR/demoagent.log
(_output/bin/demoagent -kubeconfig "$CLUSTER_DIR/kubeconfig/demo-agent.kubeconfig" -namespace "$ns" -session demo \
  -profile workspace-tools -claim demo-workspace 2>&1 | tee "$agent_log") &
agent_pid=$!
# Turn 0's write waits for a person: the request is named after its call.
request=""
for _ in $(seq 600); do
  request=$(plugin_as demo-approver pending -o name 2>/dev/null | head -n1 | sed 's|.*/||')
  [ -n "$request" ] && break
  kill -0 "$agent_pid" 2>/dev/null || { wait "$agent_pid"; exit 1; }
  sleep 0.2
done
[ -n "$request" ] || { echo "no approval request appeared" >&2; exit 1; }
plugin_as demo-approver pending -o wide
# The answer names the question the approver read (its ID, QUESTION above):
# a call asked again under the same name is not decided by it.
question=$(as_approver get approvalrequest "$request" -o jsonpath='{.metadata.annotations.toolgate\.dev/question-seal}')
say "demo-agent tries to approve its own call and is refused; demo-approver approves the question it read (kubectl toolgate approve --question)"
plugin_as demo-agent approve "$request" --question "$question" 2>&1 | sed 's/^/  refused: /' || true
plugin_as demo-approver approve "$request" --question "$question" -m "fine"
say "the agent receives each turn's results in model order as they commit (turn 1: three parallel reads and a dotfile read the guard denies)"
wait "$agent_pid"
turn1=$(sed -n 's/^agent: turn \([0-9]*\) submitted.*/\1/p' "$agent_log" | tail -n1)

say "committed transcript (model order): kubectl toolgate transcript demo"
plugin_as demo-agent transcript demo
as_agent get toolcalls --sort-by=.status.schedule.commitSequence \
  -o custom-columns='NAME:.metadata.name,SEQ:.status.schedule.commitSequence,MODE:.status.schedule.executionMode,OUTCOME:.status.result.outcome,CODE:.status.result.errorCode'
say "why was the dotfile read refused? kubectl toolgate trace demo-t${turn1}-i3"
plugin_as demo-agent trace "demo-t${turn1}-i3"
say "session"
as_agent get agentsession demo -o jsonpath='{"committed: "}{.status.committedCalls}{"  succeeded: "}{.status.counts.succeeded}{"  denied: "}{.status.counts.denied}{"  contexts for the next step: "}{.status.deferredContexts}{"\n"}'

say "metrics: the manager serves them over HTTPS to a caller allowed get on /metrics (ClusterRole toolgate-metrics-reader)"
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: ServiceAccount
metadata: {name: metrics-reader, namespace: $ns}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: toolgate-demo-metrics-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: toolgate-metrics-reader}
subjects: [{kind: ServiceAccount, name: metrics-reader, namespace: $ns}]
YAML
metrics_ip=$(kubectl -n toolgate-system get pods -l control-plane=controller-manager -o jsonpath='{.items[0].status.podIP}')
metrics_token=$(kubectl -n "$ns" create token metrics-reader)
settled=""
for _ in $(seq 30); do
  settled=$(curl -fsSk -H "Authorization: Bearer $metrics_token" "https://$metrics_ip:8080/metrics" 2>/dev/null | grep -c '^toolgate_toolcall_settled_total' || true)
  [ "${settled:-0}" -gt 0 ] && break
  sleep 1 # the role binding reaches the manager's authorizer within moments
done
[ "${settled:-0}" -gt 0 ] || { echo "demo: the manager's metrics were not readable at https://$metrics_ip:8080/metrics" >&2; exit 1; }
echo "  https://$metrics_ip:8080/metrics answered: $settled toolgate_toolcall_settled_total series"

say "what is running now"
cat <<TEXT
  kubeconfig (admin):   $KUBECONFIG_ADMIN   (demo users: $CLUSTER_DIR/kubeconfig/demo-agent.kubeconfig, demo-approver.kubeconfig)
  MCP gateway:          http://127.0.0.1:18443/mcp/$ns/SESSION   (docs/mcp.md; an AgentSession owned by system:serviceaccount:$ns:mcp-agent)
  its bearer token:     kubectl --kubeconfig $KUBECONFIG_ADMIN -n $ns create token mcp-agent --audience toolgate-gateway
  traces (Jaeger API):  curl -s 'http://127.0.0.1:16686/api/traces?service=toolgate-manager&limit=5'
                        (one trace per call; the Jaeger UI is not part of the module Jaeger is built from, so its page at :16686 is a placeholder)
  a call's stages:      PATH=$root/_output/bin:\$PATH kubectl toolgate trace demo-t0-i0 -n $ns --kubeconfig $KUBECONFIG_ADMIN
  metrics:              curl -sk -H "Authorization: Bearer \$(kubectl --kubeconfig $KUBECONFIG_ADMIN -n $ns create token metrics-reader)" https://$metrics_ip:8080/metrics
                        (the pod's address; ServiceAccount $ns/metrics-reader is bound to toolgate-metrics-reader)
  remove everything:    make demo-down
TEXT

{{/*
Names are fixed, not derived from the release: the ClusterRoles people bind
(toolgate-agent, toolgate-approver, toolgate-viewer), the admission policies
and the CRDs are cluster-wide, so toolgate installs once per cluster, under
the same names as config/default.
*/}}

{{- define "toolgate.labels" -}}
app.kubernetes.io/name: toolgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The manager's pods. control-plane=controller-manager is also what tool
pods' NetworkPolicies admit (the manager's --manager-pod-labels default). */}}
{{- define "toolgate.selectorLabels" -}}
control-plane: controller-manager
app.kubernetes.io/name: toolgate
{{- end }}

{{- define "toolgate.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "toolgate.serviceAccount" -}}
toolgate-controller-manager
{{- end }}

{{/* Fails the render on a scope the chart does not know, or a namespaced
install that watches nothing. */}}
{{- define "toolgate.namespaced" -}}
{{- if eq .Values.rbac.scope "namespaced" -}}
{{- if not .Values.rbac.watchNamespaces -}}
{{- fail "rbac.scope=namespaced needs rbac.watchNamespaces (the namespaces the manager may act in)" -}}
{{- end -}}
true
{{- else if ne .Values.rbac.scope "cluster" -}}
{{- fail (printf "rbac.scope must be cluster or namespaced, not %q" .Values.rbac.scope) -}}
{{- end -}}
{{- end }}

{{/* The gateway's pods (gateway.enabled). No control-plane label: the
manager's selector, its metrics Service and tool pods' NetworkPolicies
must not take them in. */}}
{{- define "toolgate.gateway.selectorLabels" -}}
app.kubernetes.io/name: toolgate
app.kubernetes.io/component: gateway
{{- end }}

{{- define "toolgate.gateway.serviceAccount" -}}
toolgate-gateway
{{- end }}

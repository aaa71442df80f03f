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

{{/* The namespaces the manager watches in the namespaced scope, as a JSON
list (fromJsonArray): rbac.watchNamespaces, then each agentNamespaces name
not already listed. The manager's Roles (rbac.yaml), its --watch-namespaces
(deployment.yaml) and NOTES.txt all use this one list. */}}
{{- define "toolgate.watchNamespaces" -}}
{{- $names := list -}}
{{- range .Values.agentNamespaces -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- concat (.Values.rbac.watchNamespaces | default (list)) $names | uniq | toJson -}}
{{- end }}

{{/* Fails the render on a scope the chart does not know, or a namespaced
install that watches nothing. */}}
{{- define "toolgate.namespaced" -}}
{{- if eq .Values.rbac.scope "namespaced" -}}
{{- if not (include "toolgate.watchNamespaces" . | fromJsonArray) -}}
{{- fail "rbac.scope=namespaced needs rbac.watchNamespaces or agentNamespaces (the namespaces the manager may act in)" -}}
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

{{/* The egress proxy's pods: no control-plane label either. */}}
{{- define "toolgate.egress.selectorLabels" -}}
app.kubernetes.io/name: toolgate
app.kubernetes.io/component: egress
{{- end }}

{{- define "toolgate.gateway.serviceAccount" -}}
toolgate-gateway
{{- end }}

{{/* RoleBinding subjects from a list of agentNamespaces' {kind, name,
namespace}: a User or Group in the RBAC API group, a ServiceAccount with
its namespace (values.schema.json requires it, and only for it). */}}
{{- define "toolgate.subjects" -}}
{{- range . }}
  - kind: {{ .kind }}
    name: {{ .name | quote }}
    {{- if eq .kind "ServiceAccount" }}
    namespace: {{ .namespace }}
    {{- else }}
    apiGroup: rbac.authorization.k8s.io
    {{- end }}
{{- end }}
{{- end }}

{{/*
The OpenTelemetry environment of the manager and the gateway (tracing):
nothing without an endpoint, which leaves tracing off.
*/}}
{{- define "toolgate.tracingEnv" -}}
{{- with .Values.tracing.endpoint }}
- {name: OTEL_EXPORTER_OTLP_ENDPOINT, value: {{ . | quote }}}
- {name: OTEL_EXPORTER_OTLP_PROTOCOL, value: {{ $.Values.tracing.protocol | quote }}}
{{- with $.Values.tracing.sampler }}
- {name: OTEL_TRACES_SAMPLER, value: {{ . | quote }}}
{{- end }}
{{- with $.Values.tracing.samplerArg }}
- {name: OTEL_TRACES_SAMPLER_ARG, value: {{ . | quote }}}
{{- end }}
{{- end }}
{{- end }}

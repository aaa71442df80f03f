// Package chart checks the Helm chart (charts/toolgate) against the
// kustomize configuration (config/): the chart's hand-written templates
// must install what config/ installs, and its rendered objects must be
// accepted by a real API server.
//
// The chart is rendered with the cached helm (`make helm`) in both scopes
// (cluster-wide with the default values; namespaced with the watched
// namespaces of config/namespaced) and with hack/local-values.yaml, and
// compared with config/default, config/namespaced and config/local,
// rendered by kubectl kustomize, object by object (kind,
// namespace, name). Both sides must hold the same objects, except the
// Namespace (Helm installs into a namespace it does not own) and the
// chart's metrics Service, ServiceMonitor and PodDisruptionBudget (config/
// has none). For each pair it compares:
//
//   - CustomResourceDefinitions, ValidatingAdmissionPolicies and their
//     bindings: the whole spec;
//   - ClusterRoles and Roles: rules, aggregationRule and the labels outside
//     the app.kubernetes.io/ and helm.sh/ prefixes (aggregate-to-view);
//   - RoleBindings and ClusterRoleBindings: roleRef and subjects;
//   - ServiceAccounts: automountServiceAccountToken;
//   - the Deployment: replicas, image and pull policy, the selector and pod
//     labels (the chart's include config/'s), service account, pod and
//     container security contexts, command, args (as a set), env, probes,
//     resources, hostNetwork and the termination grace period; args and env
//     compared regardless of order.
//
// Labels the chart adds (app.kubernetes.io/*, helm.sh/chart) and
// annotations are not compared.
//
// On a real API server (envtest, no pods) it creates every rendered object
// with a server-side dry run, and runs helm install, helm upgrade with a
// changed value and helm uninstall, after which no object of toolgate's
// may be left (seen failing with crds.keep=true).
package chart

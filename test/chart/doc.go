// Package chart checks the Helm chart (charts/toolgate) against the
// kustomize configuration (config/): the chart's hand-written templates
// must install what config/ installs, and its rendered objects must be
// accepted by a real API server.
//
// The chart is rendered with the cached helm (`make helm`) in both scopes
// (cluster-wide with the default values; namespaced with the watched
// namespaces of config/namespaced), with hack/local-values.yaml and with
// gateway.enabled, and compared with config/default, config/namespaced,
// config/local and config/default with config/gateway, rendered by
// kubectl kustomize, object by object (kind, namespace, name). Both sides
// must hold the same objects, except the Namespace (Helm installs into a
// namespace it does not own), the chart's ServiceMonitor and
// PodDisruptionBudget (config/ has none) and the gateway's impersonator
// RoleBindings, one per gateway.impersonateNamespaces (config/gateway
// leaves them to kubectl; they are checked to bind that role to the
// gateway in exactly those namespaces, and no ClusterRoleBinding to bind
// it). For each pair it compares:
//
//   - CustomResourceDefinitions, ValidatingAdmissionPolicies and their
//     bindings: the whole spec;
//   - ClusterRoles and Roles: rules, aggregationRule and the labels outside
//     the app.kubernetes.io/ and helm.sh/ prefixes;
//   - RoleBindings and ClusterRoleBindings: roleRef and subjects;
//   - ServiceAccounts: automountServiceAccountToken;
//   - Services: ports;
//   - the Deployments (the manager's, the gateway's): replicas, image and pull policy, the selector and pod
//     labels (the chart's include config/'s), service account, pod and
//     container security contexts, command, args (as a set), env, probes,
//     resources, hostNetwork and the termination grace period; args and env
//     compared regardless of order; the gateway's container ports too.
//
// Labels the chart adds (app.kubernetes.io/*, helm.sh/chart) and
// annotations are not compared. Selectors and pod labels are the chart's
// wider (app.kubernetes.io/name=toolgate): they must include config/'s, and
// the manager's must not select the gateway's pods. With gateway.enabled
// unset or false nothing of the gateway's is rendered.
//
// The agent namespaces (agentNamespaces) have no counterpart in config/:
// they are checked on their own, two entries (one the chart creates, one
// that exists), for the Namespace (Pod Security restricted, the entry's
// labels, kept on uninstall), the RoleBindings' roleRef and subjects as
// listed (none for an empty list), and, in the namespaced scope, the
// manager watching rbac.watchNamespaces and them merged, each once (its
// --watch-namespaces, Roles and RoleBindings); bad entries are refused.
//
// On a real API server (envtest, no pods) it creates every rendered object
// with a server-side dry run (the gateway's included), and runs helm
// install, helm upgrade with changed values (the gateway turned on) and
// helm uninstall, after which no object of toolgate's
// may be left (seen failing with crds.keep=true) but an agent namespace,
// which is kept.
package chart

// Package v1alpha1 contains the toolgate.dev/v1alpha1 API: ToolProfile,
// AgentSession, ToolCall and ApprovalRequest.
//
// +kubebuilder:object:generate=true
// +groupName=toolgate.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every toolgate kind.
	GroupVersion = schema.GroupVersion{Group: "toolgate.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the toolgate kinds with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the toolgate kinds to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme

	knownTypes []runtime.Object
)

// register records kinds for addKnownTypes; each kind's file calls it.
func register(objs ...runtime.Object) { knownTypes = append(knownTypes, objs...) }

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, knownTypes...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

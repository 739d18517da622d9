package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of every kind in this package.
var GroupVersion = schema.GroupVersion{Group: "policies.tollgate.dev", Version: "v1"}

var (
	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&PolicyServer{}, &PolicyServerList{},
		&ClusterAdmissionPolicy{}, &ClusterAdmissionPolicyList{},
		&AdmissionPolicy{}, &AdmissionPolicyList{},
		&ClusterAdmissionPolicyGroup{}, &ClusterAdmissionPolicyGroupList{},
		&AdmissionPolicyGroup{}, &AdmissionPolicyGroupList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

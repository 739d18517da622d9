package controller_test

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/crds/controller"
)

// BuildConfig turns the policies of one PolicyServer into its policies.yml; a policy the server
// would refuse is left out, with the reason.
func ExampleBuildConfig() {
	ps := &v1.PolicyServer{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	labels := &v1.AdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "labels"},
		Spec: v1.AdmissionPolicySpec{ModuleSpec: v1.ModuleSpec{
			Module:   "ghcr.io/kubewarden/policies/safe-labels:v1.0.0",
			Settings: runtime.RawExtension{Raw: []byte(`{"mandatory_labels": ["owner"]}`)},
		}},
	}
	broken := &v1.ClusterAdmissionPolicyGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "signed"},
		Spec: v1.ClusterAdmissionPolicyGroupSpec{
			GroupSpec: v1.GroupSpec{Expression: "signed() &&", Message: "unsigned image"},
			Policies:  map[string]v1.ClusterPolicyGroupMember{"signed": {ModuleSpec: v1.ModuleSpec{Module: "registry://r/sig:1"}}},
		},
	}
	yml, skipped := controller.BuildConfig([]v1.Policy{labels, broken}, ps, controller.Options{})
	fmt.Print(string(yml))
	fmt.Println(skipped["clusterwide-group-signed"])
	// Output:
	// {
	//   "namespaced-team-a-labels": {
	//     "allowedToMutate": false,
	//     "contextAwareResources": [],
	//     "hostCapabilities": [
	//       "*"
	//     ],
	//     "module": "registry://ghcr.io/kubewarden/policies/safe-labels:v1.0.0",
	//     "namespacedName": {
	//       "Name": "labels",
	//       "Namespace": "team-a"
	//     },
	//     "policyMode": "protect",
	//     "settings": {
	//       "mandatory_labels": [
	//         "owner"
	//       ]
	//     }
	//   }
	// }
	// the policy server would refuse this policy: ClusterAdmissionPolicyGroup signed: spec.expression: value "signed() &&": unexpected end of expression at offset 11
}

package gkdiff

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/tollgate-dev/tollgate/host/capabilities"
	"github.com/tollgate-dev/tollgate/host/policy"
)

// ClusterSide runs the Wasm module context-aware (settings fromCluster:
// true) through tollgate's host, its kubernetes/get_resource calls answered
// by host/capabilities over client-go's fake dynamic client holding the
// settings' Namespace objects, as a cluster would hold them. It is compared
// with a Reference whose NamespacesFromCluster is set (a namespace the
// cluster does not have fails the request, as in Gatekeeper's webhook).
type ClusterSide struct{ *WasmSide }

func (ClusterSide) Name() string { return "wasm-from-cluster" }

// Load moves the settings' namespaces into a fake cluster and loads the
// module with fromCluster settings, allowed to read v1 Namespaces.
func (s ClusterSide) Load(settings []byte) (Loaded, error) {
	var v map[string]json.RawMessage
	if err := json.Unmarshal(settings, &v); err != nil {
		return nil, err
	}
	var nss []map[string]any
	if raw, ok := v["namespaces"]; ok {
		if err := json.Unmarshal(raw, &nss); err != nil {
			return nil, fmt.Errorf("namespaces: %w", err)
		}
	}
	delete(v, "namespaces")
	v["fromCluster"] = json.RawMessage("true")
	cs, _ := json.Marshal(v)

	nsGVR := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	var objs []runtime.Object
	for _, n := range nss {
		objs = append(objs, &unstructured.Unstructured{Object: n})
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{nsGVR: "NamespaceList"}, objs...)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot)
	// No informer caches: every get is a direct call to the fake client.
	k, err := capabilities.NewKubernetes(capabilities.KubeOptions{Dynamic: dyn, Mapper: mapper, MaxCachedObjects: -1})
	if err != nil {
		return nil, err
	}
	calls, err := capabilities.New(capabilities.Options{Kubernetes: k}).ForPolicy("gatekeeper-mutation",
		capabilities.Allow{Resources: []capabilities.Resource{{APIVersion: "v1", Kind: "Namespace"}}})
	if err != nil {
		return nil, err
	}
	p, err := s.host.Load(context.Background(), policy.Spec{
		ID: "gatekeeper-mutation", Module: s.module, Settings: cs, Timeout: 30 * time.Second, PoolSize: 1,
		HostCalls: calls, HostCallsInline: true,
	})
	if err != nil {
		return nil, err
	}
	return wasmLoaded{&Wasm{p: p}}, nil
}

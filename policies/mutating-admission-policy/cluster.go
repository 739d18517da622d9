package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/tollgate-dev/tollgate/sdk/capabilities"
)

// scopeProbeName is the name of the object a get_resource asks for to learn a
// paramKind's scope: the host answers "is namespaced, but no namespace was
// provided" for a namespaced kind and "Cannot find ... named" for a
// cluster-scoped one (no such object is expected to exist).
const scopeProbeName = "tollgate-paramkind-scope-probe"

// hostCluster is the engine's Cluster through Kubewarden's host capabilities:
// kubernetes/get_resource (namespaces, a named param, the scope probe),
// list_resources_by_namespace and list_resources_all (params by selector),
// can_i (the authorizer). The policy entry must declare v1 Namespace and the
// paramKind in contextAwareResources.
type hostCluster struct {
	host capabilities.Host

	mu     sync.Mutex
	scopes map[string]bool // "apiVersion/kind" -> namespaced
}

func newHostCluster(h capabilities.Host) *hostCluster {
	return &hostCluster{host: h, scopes: map[string]bool{}}
}

func (c *hostCluster) Namespace(name string) (*corev1.Namespace, error) {
	ns := &corev1.Namespace{}
	if err := c.host.GetResourceInto(capabilities.GetResourceRequest{APIVersion: "v1", Kind: "Namespace", Name: name}, ns); err != nil {
		return nil, err
	}
	return ns, nil
}

func (c *hostCluster) ParamsNamespaced(apiVersion, kind string) (bool, error) {
	key := apiVersion + "/" + kind
	c.mu.Lock()
	namespaced, ok := c.scopes[key]
	c.mu.Unlock()
	if ok {
		return namespaced, nil
	}
	_, err := c.host.GetResource(capabilities.GetResourceRequest{APIVersion: apiVersion, Kind: kind, Name: scopeProbeName})
	switch {
	case err == nil || capabilities.IsNotFound(err):
		namespaced = false
	case strings.Contains(err.Error(), "is namespaced, but no namespace was provided"):
		namespaced = true
	default:
		return false, err
	}
	c.mu.Lock()
	c.scopes[key] = namespaced
	c.mu.Unlock()
	return namespaced, nil
}

func (c *hostCluster) Params(apiVersion, kind, namespace, name, labelSelector string) ([]*unstructured.Unstructured, error) {
	if name != "" {
		raw, err := c.host.GetResource(capabilities.GetResourceRequest{APIVersion: apiVersion, Kind: kind, Name: name, Namespace: namespace})
		if capabilities.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		u, err := decodeObject(raw)
		if err != nil {
			return nil, err
		}
		return []*unstructured.Unstructured{u}, nil
	}
	var list capabilities.ResourceList
	var err error
	if namespace != "" {
		list, err = c.host.ListResourcesByNamespace(capabilities.ListResourcesByNamespaceRequest{APIVersion: apiVersion, Kind: kind, Namespace: namespace, LabelSelector: labelSelector})
	} else {
		list, err = c.host.ListAllResources(capabilities.ListAllResourcesRequest{APIVersion: apiVersion, Kind: kind, LabelSelector: labelSelector})
	}
	if err != nil {
		return nil, err
	}
	out := make([]*unstructured.Unstructured, 0, len(list.Items))
	for _, item := range list.Items {
		u, err := decodeObject(item)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

// decodeObject decodes an object as the apiserver's informers hold an
// unstructured one: integers as int64.
func decodeObject(raw []byte) (*unstructured.Unstructured, error) {
	var m map[string]any
	if err := utiljson.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("the host's answer is not an object: %w", err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// Authorize asks kubernetes/can_i, a SubjectAccessReview of the request's user.
// Non-resource checks (paths) cannot be asked that way: no opinion.
func (c *hostCluster) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if !a.IsResourceRequest() {
		return authorizer.DecisionNoOpinion, "non-resource checks cannot be asked through kubernetes/can_i", nil
	}
	req := capabilities.CanIRequest{SubjectAccessReview: capabilities.SubjectAccessReview{
		ResourceAttributes: capabilities.ResourceAttributes{
			Namespace: a.GetNamespace(), Verb: a.GetVerb(), Group: a.GetAPIGroup(), Version: a.GetAPIVersion(),
			Resource: a.GetResource(), Subresource: a.GetSubresource(), Name: a.GetName(),
		},
	}}
	if u := a.GetUser(); u != nil {
		req.SubjectAccessReview.User, req.SubjectAccessReview.Groups = u.GetName(), u.GetGroups()
	}
	status, err := c.host.CanI(req)
	if err != nil {
		return authorizer.DecisionNoOpinion, "", err
	}
	if status.EvaluationError != "" {
		err = errors.New(status.EvaluationError)
	}
	switch {
	case status.Allowed:
		return authorizer.DecisionAllow, status.Reason, err
	case status.Denied:
		return authorizer.DecisionDeny, status.Reason, err
	}
	return authorizer.DecisionNoOpinion, status.Reason, err
}

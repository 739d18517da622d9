package main

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/jsonengine"
	"github.com/tollgate-dev/tollgate/sdk/capabilities"
)

// scopeProbeName is the name of the object a get_resource asks for to learn a
// paramKind's scope: the host answers "is namespaced, but no namespace was
// provided" for a namespaced kind and "Cannot find ... named" for a
// cluster-scoped one (no such object is expected to exist). The same
// questions as the standard-Go module's (../cluster.go), so that a session
// recorded with one replays with the other.
const scopeProbeName = "tollgate-paramkind-scope-probe"

// hostCluster is jsonengine's Cluster through Kubewarden's host capabilities:
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

func (c *hostCluster) Namespace(name string) (map[string]any, error) {
	raw, err := c.host.GetResource(capabilities.GetResourceRequest{APIVersion: "v1", Kind: "Namespace", Name: name})
	if err != nil {
		return nil, err
	}
	ns, err := jsonengine.DecodeObject(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot decode the host's answer: %w", "kubernetes/get_resource", err)
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

func (c *hostCluster) Params(apiVersion, kind, namespace, name, labelSelector string) ([]map[string]any, error) {
	if name != "" {
		raw, err := c.host.GetResource(capabilities.GetResourceRequest{APIVersion: apiVersion, Kind: kind, Name: name, Namespace: namespace})
		if capabilities.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		o, err := decodeObject(raw)
		if err != nil {
			return nil, err
		}
		return []map[string]any{o}, nil
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
	out := make([]map[string]any, 0, len(list.Items))
	for _, item := range list.Items {
		o, err := decodeObject(item)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// decodeObject decodes an object as the apiserver's informers hold an
// unstructured one: integers as int64.
func decodeObject(raw []byte) (map[string]any, error) {
	o, err := jsonengine.DecodeObject(raw)
	if err != nil || o == nil {
		if err == nil {
			err = errors.New("null")
		}
		return nil, fmt.Errorf("the host's answer is not an object: %w", err)
	}
	return o, nil
}

// Authorize asks kubernetes/can_i, a SubjectAccessReview of the request's user.
// Non-resource checks (paths) cannot be asked that way: no opinion.
func (c *hostCluster) Authorize(a jsonengine.AuthorizationRequest) (jsonengine.Decision, string, error) {
	if !a.ResourceRequest {
		return jsonengine.DecisionNoOpinion, "non-resource checks cannot be asked through kubernetes/can_i", nil
	}
	req := capabilities.CanIRequest{SubjectAccessReview: capabilities.SubjectAccessReview{
		User: a.User, Groups: a.Groups,
		ResourceAttributes: capabilities.ResourceAttributes{
			Namespace: a.Namespace, Verb: a.Verb, Group: a.APIGroup, Version: a.APIVersion,
			Resource: a.Resource, Subresource: a.Subresource, Name: a.Name,
		},
	}}
	status, err := c.host.CanI(req)
	if err != nil {
		return jsonengine.DecisionNoOpinion, "", err
	}
	if status.EvaluationError != "" {
		err = errors.New(status.EvaluationError)
	}
	switch {
	case status.Allowed:
		return jsonengine.DecisionAllow, status.Reason, err
	case status.Denied:
		return jsonengine.DecisionDeny, status.Reason, err
	}
	return jsonengine.DecisionNoOpinion, status.Reason, err
}

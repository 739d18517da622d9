package capabilities

import "encoding/json"

// GetResourceRequest is the payload of kubernetes/get_resource.
type GetResourceRequest struct {
	// APIVersion and Kind name the kind ("v1" "Namespace", "apps/v1"
	// "Deployment"); the policy must declare it in contextAwareResources.
	APIVersion string `json:"api_version"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	// Namespace is empty for a cluster-scoped kind (sent as absent).
	Namespace string `json:"namespace,omitempty"`
	// DisableCache asks the host for a fresh read instead of its cache.
	DisableCache bool `json:"disable_cache"`
	// FieldMasks prune the answer to these dot paths ("spec.containers.image");
	// apiVersion, kind and metadata are always kept.
	FieldMasks []string `json:"field_masks,omitempty"`
}

// ListResourcesByNamespaceRequest is the payload of
// kubernetes/list_resources_by_namespace.
type ListResourcesByNamespaceRequest struct {
	APIVersion string `json:"api_version"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	// LabelSelector and FieldSelector use the apiserver's syntax
	// ("app=web,tier!=db", "metadata.name=x"); empty means none.
	LabelSelector string   `json:"label_selector,omitempty"`
	FieldSelector string   `json:"field_selector,omitempty"`
	FieldMasks    []string `json:"field_masks,omitempty"`
}

// ListAllResourcesRequest is the payload of kubernetes/list_resources_all:
// the objects of a kind in every namespace (or a cluster-scoped kind).
type ListAllResourcesRequest struct {
	APIVersion    string   `json:"api_version"`
	Kind          string   `json:"kind"`
	LabelSelector string   `json:"label_selector,omitempty"`
	FieldSelector string   `json:"field_selector,omitempty"`
	FieldMasks    []string `json:"field_masks,omitempty"`
}

// ResourceList is the answer of the list operations: a Kubernetes List
// ("<Kind>List") whose items are the objects as JSON.
type ResourceList struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Items      []json.RawMessage `json:"items"`
}

// ResourceAttributes are the resource attributes of a SubjectAccessReview.
// Empty optional fields are sent as absent.
type ResourceAttributes struct {
	Namespace   string `json:"namespace,omitempty"`
	Verb        string `json:"verb"`
	Group       string `json:"group,omitempty"`
	Version     string `json:"version,omitempty"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
	Name        string `json:"name,omitempty"`
}

// SubjectAccessReview is the question of kubernetes/can_i: may User (with
// Groups) do ResourceAttributes.
type SubjectAccessReview struct {
	User               string             `json:"user"`
	Groups             []string           `json:"groups,omitempty"`
	ResourceAttributes ResourceAttributes `json:"resource_attributes"`
}

// CanIRequest is the payload of kubernetes/can_i. Unlike policy-sdk-go's,
// it sends resource_attributes in snake_case, as the host's decoder
// (policy-sdk-rust's) expects.
type CanIRequest struct {
	SubjectAccessReview SubjectAccessReview `json:"subject_access_review"`
	DisableCache        bool                `json:"disable_cache"`
}

// SubjectAccessReviewStatus is the answer of kubernetes/can_i, the status of
// the SubjectAccessReview the host made.
type SubjectAccessReviewStatus struct {
	Allowed         bool   `json:"allowed"`
	Denied          bool   `json:"denied,omitempty"`
	Reason          string `json:"reason,omitempty"`
	EvaluationError string `json:"evaluationError,omitempty"`
}

// GetResource returns the object req names, as JSON. An object that does not
// exist is an error ([IsNotFound] tells it apart).
func (h Host) GetResource(req GetResourceRequest) (json.RawMessage, error) {
	return h.kubernetes("get_resource", req)
}

// GetResourceInto reads the object req names into v (a pointer to a struct
// with the fields the policy needs).
func (h Host) GetResourceInto(req GetResourceRequest, v any) error {
	raw, err := h.GetResource(req)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return decodeError("kubernetes", "get_resource", err)
	}
	return nil
}

// ListResourcesByNamespace returns the objects of a namespaced kind in one
// namespace.
func (h Host) ListResourcesByNamespace(req ListResourcesByNamespaceRequest) (ResourceList, error) {
	return h.list("list_resources_by_namespace", req)
}

// ListAllResources returns the objects of a kind in every namespace.
func (h Host) ListAllResources(req ListAllResourcesRequest) (ResourceList, error) {
	return h.list("list_resources_all", req)
}

// ListResourcesByNamespaceRaw is ListResourcesByNamespace without decoding:
// the List object's JSON as the host sent it, for a policy that reads only a
// few fields of many items (with sdk/fastjson, say) and should not pay
// encoding/json's reflection for the rest. Under TinyGo that is most of the
// cost of a list of hundreds of objects.
func (h Host) ListResourcesByNamespaceRaw(req ListResourcesByNamespaceRequest) (json.RawMessage, error) {
	return h.kubernetes("list_resources_by_namespace", req)
}

// ListAllResourcesRaw is ListAllResources without decoding (see
// ListResourcesByNamespaceRaw).
func (h Host) ListAllResourcesRaw(req ListAllResourcesRequest) (json.RawMessage, error) {
	return h.kubernetes("list_resources_all", req)
}

// CanI asks the host whether a user may do something, through a
// SubjectAccessReview (the policy need not declare anything for it; the
// server needs create on subjectaccessreviews).
func (h Host) CanI(req CanIRequest) (SubjectAccessReviewStatus, error) {
	var status SubjectAccessReviewStatus
	raw, err := h.kubernetes("can_i", req)
	if err != nil {
		return status, err
	}
	if err := json.Unmarshal(raw, &status); err != nil {
		return status, decodeError("kubernetes", "can_i", err)
	}
	return status, nil
}

func (h Host) list(operation string, req any) (ResourceList, error) {
	var list ResourceList
	raw, err := h.kubernetes(operation, req)
	if err != nil {
		return list, err
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return list, decodeError("kubernetes", operation, err)
	}
	return list, nil
}

func (h Host) kubernetes(operation string, req any) (json.RawMessage, error) {
	payload, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return h.call("kubernetes", operation, payload)
}

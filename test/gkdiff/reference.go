package gkdiff

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	mutationsunversioned "github.com/open-policy-agent/gatekeeper/v3/apis/mutations/unversioned"
	mutationsv1 "github.com/open-policy-agent/gatekeeper/v3/apis/mutations/v1"
	mutationsv1alpha1 "github.com/open-policy-agent/gatekeeper/v3/apis/mutations/v1alpha1"
	mutationsv1beta1 "github.com/open-policy-agent/gatekeeper/v3/apis/mutations/v1beta1"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/mutation"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/mutation/match"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/mutation/mutators"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/mutation/schema"
	mtypes "github.com/open-policy-agent/gatekeeper/v3/pkg/mutation/types"
	pkgerrors "github.com/pkg/errors"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	k8serrors "k8s.io/apimachinery/pkg/api/errors"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The reference runs what a cluster with Gatekeeper does with the same
// settings and requests: the apiserver's handling of a mutator object (the
// CRD's structural schema from Gatekeeper's chart: pruning, defaulting,
// OpenAPI validation; the object name's DNS-subdomain rule), Gatekeeper's
// controller (decode as the storage version, scheme conversion to the
// unversioned type, MutatorFor..., System.Upsert) and its mutating webhook
// (pkg/webhook/mutation.go: service account, operation, own groups, the
// namespace object, metadata.namespace set and restored).

const (
	mutationsGroup = "mutations.gatekeeper.sh"
	// gkServiceAccount is Gatekeeper's own service account with the default
	// POD_NAMESPACE (pkg/webhook/common.go, pkg/util/pod_info.go).
	gkServiceAccount = "system:serviceaccount:gatekeeper-system:gatekeeper-admin"
)

// gatekeeperGroups are the API groups Gatekeeper's webhook never mutates
// (pkg/webhook/common.go isGatekeeperResource).
var gatekeeperGroups = map[string]bool{
	"templates.gatekeeper.sh": true, "constraints.gatekeeper.sh": true, mutationsGroup: true,
	"config.gatekeeper.sh": true, "externaldata.gatekeeper.sh": true, "expansion.gatekeeper.sh": true,
	"status.gatekeeper.sh": true,
}

// crdFiles are the chart's CRDs of the four mutator kinds.
var crdFiles = map[string]string{
	"Assign":         "assign-customresourcedefinition.yaml",
	"AssignMetadata": "assignmetadata-customresourcedefinition.yaml",
	"ModifySet":      "modifyset-customresourcedefinition.yaml",
	"AssignImage":    "assignimage-customresourcedefinition.yaml",
}

// crdVersion is one served version of a mutator CRD, ready to prune,
// default and validate.
type crdVersion struct {
	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
}

var (
	crdOnce    sync.Once
	crdErr     error
	crdSchemas map[string]map[string]*crdVersion // kind -> version
	scheme     = runtime.NewScheme()
)

// loadCRDs reads the CRDs from Gatekeeper's module in the module cache
// (GKDIFF_CRDS overrides the directory).
func loadCRDs() error {
	crdOnce.Do(func() {
		for _, add := range []func(*runtime.Scheme) error{mutationsv1.AddToScheme, mutationsv1beta1.AddToScheme, mutationsv1alpha1.AddToScheme} {
			if crdErr = add(scheme); crdErr != nil {
				return
			}
		}
		dir := os.Getenv("GKDIFF_CRDS")
		if dir == "" {
			dir, crdErr = gatekeeperCRDDir()
			if crdErr != nil {
				return
			}
		}
		crdSchemas = map[string]map[string]*crdVersion{}
		for kind, file := range crdFiles {
			b, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil {
				crdErr = err
				return
			}
			var crd apiextensionsv1.CustomResourceDefinition
			if err := yaml.Unmarshal(b, &crd); err != nil {
				crdErr = fmt.Errorf("%s: %w", file, err)
				return
			}
			crdSchemas[kind] = map[string]*crdVersion{}
			for _, v := range crd.Spec.Versions {
				if !v.Served {
					continue
				}
				var internal apiextensionsinternal.JSONSchemaProps
				if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
					crdErr = fmt.Errorf("%s %s: %w", file, v.Name, err)
					return
				}
				s, err := structuralschema.NewStructural(&internal)
				if err != nil {
					crdErr = fmt.Errorf("%s %s: %w", file, v.Name, err)
					return
				}
				val, _, err := apiservervalidation.NewSchemaValidator(&internal)
				if err != nil {
					crdErr = fmt.Errorf("%s %s: %w", file, v.Name, err)
					return
				}
				crdSchemas[kind][v.Name] = &crdVersion{structural: s, validator: val}
			}
		}
	})
	return crdErr
}

// gatekeeperCRDDir finds the chart's CRDs of the Gatekeeper module this
// test module builds with.
func gatekeeperCRDDir() (string, error) {
	out, err := goListDir("github.com/open-policy-agent/gatekeeper/v3")
	if err != nil {
		return "", err
	}
	return filepath.Join(out, "manifest_staging", "charts", "gatekeeper", "crds"), nil
}

// Gatekeeper's mutators log through controller-runtime's logger (an invalid
// label selector, for one); without a sink controller-runtime prints a stack
// trace after 30 seconds of use.
func init() { ctrllog.SetLogger(logr.Discard()) }

// Reference is Gatekeeper's mutation system loaded with one settings object.
type Reference struct {
	system     *mutation.System
	namespaces map[string]*corev1.Namespace
	// Conflicts are the mutators Upsert reported in a schema conflict.
	Conflicts []string
	// NamespacesFromCluster: the namespaces are the cluster's, and a request
	// namespace that is not one of them does not exist (the webhook's Get
	// fails with NotFound, from the cache and then from the apiserver, and
	// the request fails). Otherwise a namespace not listed exists without
	// labels (the settings' convention).
	NamespacesFromCluster bool
}

// Settings is the policy's settings shape.
type Settings struct {
	Mutators   []json.RawMessage `json:"mutators"`
	Namespaces []json.RawMessage `json:"namespaces"`
}

// NewReference builds Gatekeeper's system from the settings; an error is a
// mutator the apiserver or Gatekeeper refuses (the settings tollgate must
// refuse).
func NewReference(settings []byte) (*Reference, error) {
	if err := loadCRDs(); err != nil {
		return nil, fmt.Errorf("loading Gatekeeper's CRDs: %w", err)
	}
	var s Settings
	if err := json.Unmarshal(settings, &s); err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	r := &Reference{
		system:     mutation.NewSystem(mutation.SystemOpts{NewUUID: func() uuid.UUID { return uuid.UUID{} }}),
		namespaces: map[string]*corev1.Namespace{},
	}
	seen := map[string]bool{}
	for i, raw := range s.Mutators {
		m, id, err := mutatorFor(raw)
		if err != nil {
			return nil, fmt.Errorf("mutators[%d]: %w", i, err)
		}
		if seen[id] {
			// One object per kind and name in a cluster: a second one is an
			// update, which settings cannot express.
			return nil, fmt.Errorf("mutators[%d]: %w: %s", i, ErrDuplicate, id)
		}
		seen[id] = true
		if err := r.system.Upsert(m); err != nil {
			// A schema conflict keeps the mutator, disabled with its peers.
			if !errors.As(err, &schema.ErrConflictingSchema{}) {
				return nil, fmt.Errorf("mutators[%d]: %w", i, err)
			}
			r.Conflicts = append(r.Conflicts, id)
		}
	}
	for i, raw := range s.Namespaces {
		var ns corev1.Namespace
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &ns); err != nil {
			return nil, fmt.Errorf("namespaces[%d]: %w", i, err)
		}
		r.namespaces[ns.Name] = &ns
	}
	return r, nil
}

// ErrDuplicate is two mutators of one kind with one name.
var ErrDuplicate = errors.New("duplicate mutator")

// mutatorFor does what the apiserver and Gatekeeper's controller do with one
// mutator object.
func mutatorFor(raw json.RawMessage) (mtypes.Mutator, string, error) {
	var obj map[string]interface{}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &obj); err != nil || obj == nil {
		return nil, "", fmt.Errorf("not a JSON object: %v", err)
	}
	u := &unstructured.Unstructured{Object: obj}
	gvk := u.GroupVersionKind()
	if gvk.Group != mutationsGroup {
		return nil, "", fmt.Errorf("apiVersion %q is not of %s", u.GetAPIVersion(), mutationsGroup)
	}
	versions, ok := crdSchemas[gvk.Kind]
	if !ok {
		return nil, "", fmt.Errorf("kind %q is not a mutator", gvk.Kind)
	}
	v, ok := versions[gvk.Version]
	if !ok {
		return nil, "", fmt.Errorf("%s is not served in version %q", gvk.Kind, gvk.Version)
	}
	id := gvk.Kind + "/" + u.GetName()
	// The apiserver: name rules, then prune, default and validate.
	if errs := apimachineryvalidation.NameIsDNSSubdomain(u.GetName(), false); u.GetName() == "" || len(errs) > 0 {
		return nil, id, fmt.Errorf("metadata.name %q: invalid: %v", u.GetName(), errs)
	}
	pruning.Prune(obj, v.structural, true)
	defaulting.Default(obj, v.structural)
	if errs := apiservervalidation.ValidateCustomResource(nil, obj, v.validator); len(errs) > 0 {
		return nil, id, fmt.Errorf("%s %s: %v", gvk.Kind, u.GetName(), errs.ToAggregate())
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, id, err
	}
	// Gatekeeper's controller: the object read as the version it watches,
	// converted through its scheme, then its constructor.
	var m mtypes.Mutator
	switch gvk.Kind {
	case "Assign":
		var in mutationsv1.Assign
		var out mutationsunversioned.Assign
		if err = decode(b, &in, &out); err == nil {
			m, err = mutators.MutatorForAssign(&out)
		}
	case "AssignMetadata":
		var in mutationsv1.AssignMetadata
		var out mutationsunversioned.AssignMetadata
		if err = decode(b, &in, &out); err == nil {
			m, err = mutators.MutatorForAssignMetadata(&out)
		}
	case "ModifySet":
		var in mutationsv1.ModifySet
		var out mutationsunversioned.ModifySet
		if err = decode(b, &in, &out); err == nil {
			m, err = mutators.MutatorForModifySet(&out)
		}
	case "AssignImage":
		var in mutationsv1alpha1.AssignImage
		var out mutationsunversioned.AssignImage
		if err = decode(b, &in, &out); err == nil {
			m, err = mutators.MutatorForAssignImage(&out)
		}
	}
	if err != nil {
		return nil, id, err
	}
	return m, id, nil
}

func decode(b []byte, in, out interface{}) error {
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(b, in); err != nil {
		return err
	}
	return scheme.Convert(in, out, nil)
}

// Outcome is the result of one request, comparable between both sides.
type Outcome struct {
	// Rejected: the request fails (Gatekeeper's webhook errors; tollgate rejects).
	Rejected bool
	// Reason is Gatekeeper's error without its wrapping (mutation id, object).
	Reason string
	// Message is the whole message.
	Message string
	// Object is the mutated object, canonical JSON; empty when not mutated.
	Object string
}

func (o Outcome) String() string {
	switch {
	case o.Rejected:
		return "rejected: " + o.Message
	case o.Object != "":
		return "mutated: " + o.Object
	}
	return "unchanged"
}

// Request is one admission request.
type Request struct {
	Operation string
	Username  string
	Group     string
	Version   string
	Kind      string
	Namespace string
	Name      string
	Object    []byte
}

// Evaluate runs the request as Gatekeeper's mutating webhook would
// (pkg/webhook/mutation.go Handle and mutateRequest).
func (r *Reference) Evaluate(req Request) Outcome {
	if req.Username == gkServiceAccount {
		return Outcome{}
	}
	if !match.IsSupportedMutationOperation(admissionv1.Operation(req.Operation)) {
		return Outcome{}
	}
	if gatekeeperGroups[req.Group] {
		return Outcome{}
	}
	var ns *corev1.Namespace
	reqNamespace := req.Namespace
	switch {
	case req.Kind == "Namespace" && req.Group == "":
		reqNamespace = ""
		ns = &corev1.Namespace{}
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(req.Object, ns); err != nil {
			return Outcome{Rejected: true, Message: err.Error(), Reason: err.Error()}
		}
	case reqNamespace != "":
		if n, ok := r.namespaces[reqNamespace]; ok {
			ns = n.DeepCopy()
		} else if r.NamespacesFromCluster {
			err := k8serrors.NewNotFound(corev1.Resource("namespaces"), reqNamespace)
			return Outcome{Rejected: true, Message: err.Error(), Reason: err.Error()}
		} else {
			ns = &corev1.Namespace{}
			ns.Name = reqNamespace
		}
	}
	obj := unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(req.Object); err != nil {
		return Outcome{Rejected: true, Message: err.Error(), Reason: err.Error()}
	}
	oldNS := obj.GetNamespace()
	obj.SetNamespace(reqNamespace)
	mutable := &mtypes.Mutable{
		Object: &obj, Namespace: ns, Username: req.Username,
		Source: mtypes.SourceTypeOriginal, Operation: admissionv1.Operation(req.Operation),
	}
	mutated, err := r.system.Mutate(context.Background(), mutable)
	if err != nil {
		return Outcome{Rejected: true, Message: err.Error(), Reason: reason(err)}
	}
	if !mutated {
		return Outcome{}
	}
	mutable.Object.SetNamespace(oldNS)
	b, err := mutable.Object.MarshalJSON()
	if err != nil {
		return Outcome{Rejected: true, Message: err.Error(), Reason: err.Error()}
	}
	c, err := Canonical(b)
	if err != nil {
		return Outcome{Rejected: true, Message: err.Error(), Reason: err.Error()}
	}
	if o, _ := Canonical(req.Object); o == c {
		return Outcome{} // an empty patch
	}
	return Outcome{Object: c}
}

// reason strips Gatekeeper's wrapping ("mutation <uuid> for mutator <id>
// failed for <object>: ") down to the cause; a not-converging error keeps
// its sentinel's text.
func reason(err error) string {
	if errors.Is(err, mutation.ErrNotConverging) {
		return mutation.ErrNotConverging.Error()
	}
	return pkgerrors.Cause(err).Error()
}

// goListDir is the directory of a module in the module cache.
func goListDir(module string) (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", module, err)
	}
	return strings.TrimSpace(string(out)), nil
}

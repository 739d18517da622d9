package jsonengine

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"

	celconfig "k8s.io/apiserver/pkg/apis/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/library"
	"k8s.io/apiserver/pkg/cel/mutation/dynamic"
)

// The CEL environment of a MutatingAdmissionPolicy, declared as the
// apiserver declares it for stored expressions (every library of the base
// environment whatever its version, then the admission variables, the
// composited "variables" and the patch types), without the packages that
// need net/http: the Object and JSONPatch types are resolved here rather than
// by k8s.io/apiserver/pkg/cel/mutation (whose type-resolver interface lives
// in cel/common, which imports apimachinery's meta/v1).

// baseEnvOptions are the apiserver's base environment options
// (k8s.io/apiserver/pkg/cel/environment, baseOpts) as the stored-expressions
// environment enables them: all of them but the strings library version 0,
// which version 2 replaces. The authz libraries are this engine's (authz.go:
// k8s.io/apiserver's need net/http, see scripts/tinygo-patches "nonet"), and
// so is the format library (format.go: k8s.io/apiserver's needs package net).
func baseEnvOptions() ([]cel.EnvOption, []cel.ProgramOption) {
	envOpts := []cel.EnvOption{
		cel.HomogeneousAggregateLiterals(),
		cel.EagerlyValidateDeclarations(true),
		cel.DefaultUTCTimeZone(true),
		library.URLs(),
		library.Regex(),
		library.Lists(),
		cel.CostEstimatorOptions(checker.PresenceTestHasCost(false)),
	}
	envOpts = append(envOpts, authzLibraries()...)
	envOpts = append(envOpts,
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		library.Quantity(),
		cel.ASTValidators(
			cel.ValidateDurationLiterals(),
			cel.ValidateTimestampLiterals(),
			cel.ValidateRegexLiterals(),
			cel.ValidateHomogeneousAggregateLiterals(),
		),
		ext.Strings(ext.StringsVersion(2)),
		ext.Sets(),
		library.IP(),
		library.CIDR(),
	)
	envOpts = append(envOpts, formatLibraries()...)
	envOpts = append(envOpts, authzSelectorsLibraries()...)
	envOpts = append(envOpts,
		ext.TwoVarComprehensions(),
		library.SemverLib(library.SemverVersion(1)),
		ext.Lists(ext.ListsVersion(3)),
	)
	progOpts := []cel.ProgramOption{
		cel.EvalOptions(cel.OptOptimize, cel.OptTrackCost),
		cel.CostLimit(celconfig.PerCallLimit),
		cel.CostTrackerOptions(interpreter.PresenceTestHasCost(false)),
	}
	progOpts = append(progOpts, costTracking()...)
	return envOpts, progOpts
}

// costTracking is the apiserver's StrictCostOpt: the Kubernetes library cost
// estimator for the runtime cost of the library functions (the authz
// functions included, which it knows by name).
func costTracking() []cel.ProgramOption {
	return []cel.ProgramOption{cel.CostTracking(&library.CostEstimator{})}
}

// requestType and namespaceType are the declared types of the "request" and
// "namespaceObject" variables (the apiserver's BuildRequestType and
// BuildNamespaceType: the same names and fields).
func requestType() *apiservercel.DeclType {
	gvk := apiservercel.NewObjectType("kubernetes.GroupVersionKind", fields(
		field("group", apiservercel.StringType, true),
		field("version", apiservercel.StringType, true),
		field("kind", apiservercel.StringType, true),
	))
	gvr := apiservercel.NewObjectType("kubernetes.GroupVersionResource", fields(
		field("group", apiservercel.StringType, true),
		field("version", apiservercel.StringType, true),
		field("resource", apiservercel.StringType, true),
	))
	userInfo := apiservercel.NewObjectType("kubernetes.UserInfo", fields(
		field("username", apiservercel.StringType, false),
		field("uid", apiservercel.StringType, false),
		field("groups", apiservercel.NewListType(apiservercel.StringType, -1), false),
		field("extra", apiservercel.NewMapType(apiservercel.StringType, apiservercel.NewListType(apiservercel.StringType, -1), -1), false),
	))
	return apiservercel.NewObjectType("kubernetes.AdmissionRequest", fields(
		field("kind", gvk, true),
		field("resource", gvr, true),
		field("subResource", apiservercel.StringType, false),
		field("requestKind", gvk, true),
		field("requestResource", gvr, true),
		field("requestSubResource", apiservercel.StringType, false),
		field("name", apiservercel.StringType, true),
		field("namespace", apiservercel.StringType, false),
		field("operation", apiservercel.StringType, true),
		field("userInfo", userInfo, true),
		field("dryRun", apiservercel.BoolType, false),
		field("options", apiservercel.DynType, false),
	))
}

func namespaceType() *apiservercel.DeclType {
	strings := apiservercel.NewListType(apiservercel.StringType, -1)
	spec := apiservercel.NewObjectType("kubernetes.NamespaceSpec", fields(
		field("finalizers", strings, true),
	))
	condition := apiservercel.NewObjectType("kubernetes.NamespaceCondition", fields(
		field("status", apiservercel.StringType, true),
		field("type", apiservercel.StringType, true),
		field("lastTransitionTime", apiservercel.TimestampType, true),
		field("message", apiservercel.StringType, true),
		field("reason", apiservercel.StringType, true),
	))
	status := apiservercel.NewObjectType("kubernetes.NamespaceStatus", fields(
		field("conditions", apiservercel.NewListType(condition, -1), true),
		field("phase", apiservercel.StringType, true),
	))
	labels := apiservercel.NewMapType(apiservercel.StringType, apiservercel.StringType, -1)
	metadata := apiservercel.NewObjectType("kubernetes.NamespaceMetadata", fields(
		field("name", apiservercel.StringType, true),
		field("generateName", apiservercel.StringType, true),
		field("namespace", apiservercel.StringType, true),
		field("labels", labels, true),
		field("annotations", labels, true),
		field("UID", apiservercel.StringType, true),
		field("creationTimestamp", apiservercel.TimestampType, true),
		field("deletionGracePeriodSeconds", apiservercel.IntType, true),
		field("deletionTimestamp", apiservercel.TimestampType, true),
		field("generation", apiservercel.IntType, true),
		field("resourceVersion", apiservercel.StringType, true),
		field("finalizers", strings, true),
	))
	return apiservercel.NewObjectType("kubernetes.Namespace", fields(
		field("metadata", metadata, true),
		field("spec", spec, true),
		field("status", status, true),
	))
}

func field(name string, t *apiservercel.DeclType, required bool) *apiservercel.DeclField {
	return apiservercel.NewDeclField(name, t, required, nil, nil)
}

func fields(fs ...*apiservercel.DeclField) map[string]*apiservercel.DeclField {
	m := make(map[string]*apiservercel.DeclField, len(fs))
	for _, f := range fs {
		m[f.Name] = f
	}
	return m
}

// newEnv builds the environment of one policy. variablesType is the
// "kubernetes.variables" object type; like the apiserver's composited
// compiler, its fields are added as the variables are compiled (the type
// provider keeps the pointer).
func newEnv(hasParams bool, variablesType *apiservercel.DeclType) (*cel.Env, []cel.ProgramOption, error) {
	envOpts, progOpts := baseEnvOptions()
	base, err := cel.NewEnv()
	if err != nil {
		return nil, nil, err
	}
	env, err := base.Extend(cel.Lib(&envLoader{envOpts, progOpts}))
	if err != nil {
		return nil, nil, fmt.Errorf("environment misconfigured: %w", err)
	}
	// The admission variables with their declared types.
	ns, req := namespaceType(), requestType()
	vars := []cel.EnvOption{
		cel.Variable("object", cel.DynType),
		cel.Variable("oldObject", cel.DynType),
		cel.Variable("namespaceObject", ns.CelType()),
		cel.Variable("request", req.CelType()),
	}
	if hasParams {
		vars = append(vars, cel.Variable("params", cel.DynType))
	}
	vars = append(vars, authorizerVariables()...)
	if env, err = extendWithDeclTypes(env, vars, costTracking(), ns, req); err != nil {
		return nil, nil, err
	}
	// The composited variables.
	if env, err = extendWithDeclTypes(env, []cel.EnvOption{cel.Variable("variables", variablesType.CelType())}, nil, variablesType); err != nil {
		return nil, nil, err
	}
	// The patch types.
	env, err = env.Extend(cel.Lib(&envLoader{envOpts: []cel.EnvOption{patchTypes(), library.JSONPatch()}}))
	if err != nil {
		return nil, nil, fmt.Errorf("environment misconfigured: %w", err)
	}
	return env, nil, nil
}

// extendWithDeclTypes is the apiserver's EnvSet.Extend for options with
// declared types: a DeclTypeProvider over the environment's type provider,
// keywords recognized as field names (Kubernetes 1.31 and later).
func extendWithDeclTypes(env *cel.Env, envOpts []cel.EnvOption, progOpts []cel.ProgramOption, declTypes ...*apiservercel.DeclType) (*cel.Env, error) {
	provider := apiservercel.NewDeclTypeProvider(declTypes...)
	provider.SetRecognizeKeywordAsFieldName(true)
	providerOpts, err := provider.EnvOptions(env.CELTypeProvider())
	if err != nil {
		return nil, err
	}
	envOpts = append(envOpts, providerOpts...)
	out, err := env.Extend(cel.Lib(&envLoader{envOpts, progOpts}))
	if err != nil {
		return nil, fmt.Errorf("environment misconfigured: %w", err)
	}
	return out, nil
}

type envLoader struct {
	envOpts  []cel.EnvOption
	progOpts []cel.ProgramOption
}

func (e *envLoader) CompileOptions() []cel.EnvOption     { return e.envOpts }
func (e *envLoader) ProgramOptions() []cel.ProgramOption { return e.progOpts }

// The patch types: "Object" and "Object.<field>..." (apply configurations,
// any field, every field dyn) and "JSONPatch".
const (
	objectTypeName    = "Object"
	jsonPatchTypeName = "JSONPatch"
)

var jsonPatchType = types.NewObjectType(jsonPatchTypeName)

// patchTypes installs a type provider that resolves the patch types and
// defers every other name to the environment's provider.
func patchTypes() cel.EnvOption {
	return func(e *cel.Env) (*cel.Env, error) {
		return cel.CustomTypeProvider(&patchTypeProvider{under: e.CELTypeProvider()})(e)
	}
}

type patchTypeProvider struct{ under types.Provider }

func isObjectTypeName(name string) bool {
	return name == objectTypeName || strings.HasPrefix(name, objectTypeName+".")
}

func (p *patchTypeProvider) FindStructType(name string) (*types.Type, bool) {
	switch {
	case name == jsonPatchTypeName:
		return types.NewTypeTypeWithParam(jsonPatchType), true
	case isObjectTypeName(name):
		return types.NewTypeTypeWithParam(dynamic.NewObjectType(name).Type()), true
	}
	return p.under.FindStructType(name)
}

func (p *patchTypeProvider) FindStructFieldNames(name string) ([]string, bool) {
	switch {
	case name == jsonPatchTypeName:
		return []string{"op", "from", "path", "value"}, true
	case isObjectTypeName(name):
		return dynamic.NewObjectType(name).FieldNames()
	}
	return p.under.FindStructFieldNames(name)
}

func (p *patchTypeProvider) FindStructFieldType(name, fieldName string) (*types.FieldType, bool) {
	switch {
	case name == jsonPatchTypeName:
		var t *types.Type
		switch fieldName {
		case "op", "from", "path":
			t = cel.StringType
		case "value":
			t = types.DynType
		}
		return &types.FieldType{Type: t}, true
	case isObjectTypeName(name):
		return dynamic.NewObjectType(name).Field(fieldName)
	}
	return p.under.FindStructFieldType(name, fieldName)
}

func (p *patchTypeProvider) NewValue(name string, fields map[string]ref.Val) ref.Val {
	switch {
	case name == jsonPatchTypeName:
		return newJSONPatchVal(fields)
	case isObjectTypeName(name):
		return dynamic.NewObjectType(name).Val(fields)
	}
	return p.under.NewValue(name, fields)
}

func (p *patchTypeProvider) EnumValue(name string) ref.Val { return p.under.EnumValue(name) }

func (p *patchTypeProvider) FindIdent(name string) (ref.Val, bool) { return p.under.FindIdent(name) }

// jsonPatchVal is a JSONPatch value: the operation's strings and its value.
type jsonPatchVal struct {
	op, from, path string
	val            ref.Val
}

func newJSONPatchVal(fields map[string]ref.Val) ref.Val {
	r := &jsonPatchVal{}
	for name, value := range fields {
		switch name {
		case "op", "path", "from":
			s, ok := value.Value().(string)
			if !ok {
				return types.NewErr("unexpected type %T for JSONPatchType '%s' field", value.Value(), name)
			}
			switch name {
			case "op":
				r.op = s
			case "path":
				r.path = s
			default:
				r.from = s
			}
		case "value":
			r.val = value
		default:
			return types.NewErr("unexpected JSONPatchType field: %s", name)
		}
	}
	return r
}

var _ traits.Indexer = (*jsonPatchVal)(nil)

func (p *jsonPatchVal) ConvertToNative(typeDesc reflect.Type) (any, error) {
	if typeDesc == reflect.TypeOf(p) {
		return p, nil
	}
	return nil, fmt.Errorf("cannot convert JSONPatch to %v", typeDesc)
}

func (p *jsonPatchVal) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case jsonPatchType:
		return p
	case types.TypeType:
		return jsonPatchType
	}
	return types.NewErr("unsupported type conversion to: %v", t)
}

func (p *jsonPatchVal) Equal(other ref.Val) ref.Val {
	o, ok := other.(*jsonPatchVal)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	if p.op != o.op || p.from != o.from || p.path != o.path {
		return types.False
	}
	if (p.val == nil) != (o.val == nil) {
		return types.False
	}
	if p.val == nil {
		return types.True
	}
	return p.val.Equal(o.val)
}

func (p *jsonPatchVal) Get(index ref.Val) ref.Val {
	if name, ok := index.Value().(string); ok {
		switch name {
		case "op":
			return types.String(p.op)
		case "path":
			return types.String(p.path)
		case "from":
			return types.String(p.from)
		case "value":
			return p.val
		}
	}
	return types.NewErr("unsupported indexer: %v", index)
}

func (p *jsonPatchVal) IsSet(field ref.Val) ref.Val {
	if name, ok := field.Value().(string); ok {
		switch name {
		case "op":
			return types.Bool(p.op != "")
		case "path":
			return types.Bool(p.path != "")
		case "from":
			return types.Bool(p.from != "")
		case "value":
			return types.Bool(p.val != nil)
		}
	}
	return types.NewErr("unsupported field: %v", field)
}

func (p *jsonPatchVal) Type() ref.Type { return jsonPatchType }
func (p *jsonPatchVal) Value() any     { return p }

package jsonengine

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"

	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apiserver/pkg/cel/library"
)

// CEL's `authorizer` and `authorizer.requestResource`: the Kubernetes authz
// and authzSelectors libraries (k8s.io/apiserver/pkg/cel/library, authz.go),
// declared with the same names, overload ids and types, and evaluated with
// the same values and errors, on this engine's authorizer (rbac.go).
// k8s.io/apiserver's own cannot be built by TinyGo: its interface takes an
// *http.Request (scripts/tinygo-patches, "nonet"). The cost of the calls is
// the library cost estimator's, which knows them by function name.

// The library's types: k8s.io/apiserver's (declared apart from authz.go
// under TinyGo by the "nonet" patch, for the cost estimator).
var (
	authorizerType    = library.AuthorizerType
	pathCheckType     = library.PathCheckType
	groupCheckType    = library.GroupCheckType
	resourceCheckType = library.ResourceCheckType
	decisionType      = library.DecisionType
)

// The variable names of the apiserver's admission CEL environment.
const (
	authorizerVarName      = "authorizer"
	requestResourceVarName = "authorizer.requestResource"
)

func authzLibraries() []cel.EnvOption {
	return []cel.EnvOption{cel.Lib(authzLib{decls: map[string][]cel.FunctionOpt{
		"path": {
			cel.MemberOverload("authorizer_path", []*cel.Type{authorizerType, cel.StringType}, pathCheckType,
				cel.BinaryBinding(authorizerPath))},
		"group": {
			cel.MemberOverload("authorizer_group", []*cel.Type{authorizerType, cel.StringType}, groupCheckType,
				cel.BinaryBinding(authorizerGroup))},
		"serviceAccount": {
			cel.MemberOverload("authorizer_serviceaccount", []*cel.Type{authorizerType, cel.StringType, cel.StringType}, authorizerType,
				cel.FunctionBinding(authorizerServiceAccount))},
		"resource": {
			cel.MemberOverload("groupcheck_resource", []*cel.Type{groupCheckType, cel.StringType}, resourceCheckType,
				cel.BinaryBinding(groupCheckResource))},
		"subresource": {
			cel.MemberOverload("resourcecheck_subresource", []*cel.Type{resourceCheckType, cel.StringType}, resourceCheckType,
				cel.BinaryBinding(resourceCheckSetter(func(r *resourceCheckVal, s string) { r.subresource = s })))},
		"namespace": {
			cel.MemberOverload("resourcecheck_namespace", []*cel.Type{resourceCheckType, cel.StringType}, resourceCheckType,
				cel.BinaryBinding(resourceCheckSetter(func(r *resourceCheckVal, s string) { r.namespace = s })))},
		"name": {
			cel.MemberOverload("resourcecheck_name", []*cel.Type{resourceCheckType, cel.StringType}, resourceCheckType,
				cel.BinaryBinding(resourceCheckSetter(func(r *resourceCheckVal, s string) { r.name = s })))},
		"check": {
			cel.MemberOverload("pathcheck_check", []*cel.Type{pathCheckType, cel.StringType}, decisionType,
				cel.BinaryBinding(pathCheckCheck)),
			cel.MemberOverload("resourcecheck_check", []*cel.Type{resourceCheckType, cel.StringType}, decisionType,
				cel.BinaryBinding(resourceCheckCheck))},
		"errored": {
			cel.MemberOverload("decision_errored", []*cel.Type{decisionType}, cel.BoolType,
				cel.UnaryBinding(func(arg ref.Val) ref.Val {
					d, ok := arg.(decisionVal)
					if !ok {
						return types.MaybeNoSuchOverloadErr(arg)
					}
					return types.Bool(d.err != nil) // only a cluster's authorizer errs (rbac.go never does)
				}))},
		"error": {
			cel.MemberOverload("decision_error", []*cel.Type{decisionType}, cel.StringType,
				cel.UnaryBinding(func(arg ref.Val) ref.Val {
					d, ok := arg.(decisionVal)
					if !ok {
						return types.MaybeNoSuchOverloadErr(arg)
					}
					if d.err == nil {
						return types.String("")
					}
					return types.String(d.err.Error())
				}))},
		"allowed": {
			cel.MemberOverload("decision_allowed", []*cel.Type{decisionType}, cel.BoolType,
				cel.UnaryBinding(func(arg ref.Val) ref.Val {
					d, ok := arg.(decisionVal)
					if !ok {
						return types.MaybeNoSuchOverloadErr(arg)
					}
					return types.Bool(d.decision == decisionAllow)
				}))},
		"reason": {
			cel.MemberOverload("decision_reason", []*cel.Type{decisionType}, cel.StringType,
				cel.UnaryBinding(func(arg ref.Val) ref.Val {
					d, ok := arg.(decisionVal)
					if !ok {
						return types.MaybeNoSuchOverloadErr(arg)
					}
					return types.String(d.reason)
				}))},
	}})}
}

// authzSelectorsLibraries is the authzSelectors library (Kubernetes 1.31,
// AuthorizeWithSelectors): the selectors are carried to the authorizer,
// which, like RBAC, does not read them.
func authzSelectorsLibraries() []cel.EnvOption {
	return []cel.EnvOption{cel.Lib(authzLib{decls: map[string][]cel.FunctionOpt{
		"fieldSelector": {
			cel.MemberOverload("authorizer_fieldselector", []*cel.Type{resourceCheckType, cel.StringType}, resourceCheckType,
				cel.BinaryBinding(resourceCheckSetter(func(r *resourceCheckVal, s string) { r.fieldSelector = s })))},
		"labelSelector": {
			cel.MemberOverload("authorizer_labelselector", []*cel.Type{resourceCheckType, cel.StringType}, resourceCheckType,
				cel.BinaryBinding(resourceCheckSetter(func(r *resourceCheckVal, s string) { r.labelSelector = s })))},
	}})}
}

// authorizerVariables declares the two variables (the apiserver's
// createEnvForOpts with HasAuthorizer).
func authorizerVariables() []cel.EnvOption {
	return []cel.EnvOption{
		cel.Variable(authorizerVarName, authorizerType),
		cel.Variable(requestResourceVarName, resourceCheckType),
	}
}

type authzLib struct{ decls map[string][]cel.FunctionOpt }

func (l authzLib) CompileOptions() []cel.EnvOption {
	opts := make([]cel.EnvOption, 0, len(l.decls))
	for name, overloads := range l.decls {
		opts = append(opts, cel.Function(name, overloads...))
	}
	return opts
}

func (authzLib) ProgramOptions() []cel.ProgramOption { return nil }

func authorizerPath(arg1, arg2 ref.Val) ref.Val {
	a, ok := arg1.(authorizerVal)
	if !ok {
		return types.MaybeNoSuchOverloadErr(arg1)
	}
	path, ok := arg2.Value().(string)
	if !ok {
		return types.MaybeNoSuchOverloadErr(arg1)
	}
	if len(strings.TrimSpace(path)) == 0 {
		return types.NewErr("path must not be empty")
	}
	return pathCheckVal{receiverOnly: receiverOnlyVal(pathCheckType), authorizer: a, path: path}
}

func authorizerGroup(arg1, arg2 ref.Val) ref.Val {
	a, ok := arg1.(authorizerVal)
	if !ok {
		return types.MaybeNoSuchOverloadErr(arg1)
	}
	group, ok := arg2.Value().(string)
	if !ok {
		return types.MaybeNoSuchOverloadErr(arg1)
	}
	return a.groupCheck(group)
}

func authorizerServiceAccount(args ...ref.Val) ref.Val {
	if len(args) != 3 {
		return types.NoSuchOverloadErr()
	}
	a, ok := args[0].(authorizerVal)
	if !ok {
		return types.MaybeNoSuchOverloadErr(args[0])
	}
	namespace, ok := args[1].Value().(string)
	if !ok {
		return types.MaybeNoSuchOverloadErr(args[1])
	}
	name, ok := args[2].Value().(string)
	if !ok {
		return types.MaybeNoSuchOverloadErr(args[2])
	}
	if len(content.IsDNS1123Subdomain(name)) > 0 {
		return types.NewErr("Invalid service account name")
	}
	if len(content.IsDNS1123Label(namespace)) > 0 {
		return types.NewErr("Invalid service account namespace")
	}
	// serviceaccount.ServiceAccountInfo.UserInfo: its username and groups.
	return authorizerVal{
		receiverOnly: receiverOnlyVal(authorizerType),
		user: &userInfo{
			name:   serviceAccountUsernamePrefix + namespace + ":" + name,
			groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace},
		},
		authorize: a.authorize,
	}
}

func groupCheckResource(arg1, arg2 ref.Val) ref.Val {
	g, ok := arg1.(groupCheckVal)
	if !ok {
		return types.MaybeNoSuchOverloadErr(arg1)
	}
	resource, ok := arg2.Value().(string)
	if !ok {
		return types.MaybeNoSuchOverloadErr(arg1)
	}
	if len(strings.TrimSpace(resource)) == 0 {
		return types.NewErr("resource must not be empty")
	}
	return g.resourceCheck(resource)
}

func resourceCheckSetter(set func(*resourceCheckVal, string)) func(arg1, arg2 ref.Val) ref.Val {
	return func(arg1, arg2 ref.Val) ref.Val {
		r, ok := arg1.(resourceCheckVal)
		if !ok {
			return types.MaybeNoSuchOverloadErr(arg1)
		}
		s, ok := arg2.Value().(string)
		if !ok {
			return types.MaybeNoSuchOverloadErr(arg1)
		}
		set(&r, s)
		return r
	}
}

func pathCheckCheck(arg1, arg2 ref.Val) ref.Val {
	p, ok := arg1.(pathCheckVal)
	if !ok {
		return types.MaybeNoSuchOverloadErr(arg1)
	}
	verb, ok := arg2.Value().(string)
	if !ok {
		return types.MaybeNoSuchOverloadErr(arg1)
	}
	return newDecisionVal(p.authorizer.authorize(&authzAttributes{
		path: p.path, verb: verb, user: p.authorizer.user,
	}))
}

func resourceCheckCheck(arg1, arg2 ref.Val) ref.Val {
	r, ok := arg1.(resourceCheckVal)
	if !ok {
		return types.MaybeNoSuchOverloadErr(arg1)
	}
	verb, ok := arg2.Value().(string)
	if !ok {
		return types.MaybeNoSuchOverloadErr(arg1)
	}
	a := r.groupCheck.authorizer
	return newDecisionVal(a.authorize(&authzAttributes{
		resourceRequest: true, apiGroup: r.groupCheck.group, apiVersionIsStar: true,
		resource: r.resource, subresource: r.subresource, namespace: r.namespace, name: r.name,
		verb: verb, user: a.user, fieldSelector: r.fieldSelector, labelSelector: r.labelSelector,
	}))
}

// newAuthorizerVal and newRequestResourceVal are the values of the two
// variables for a request (the apiserver's NewAuthorizerVal and
// NewResourceAuthorizerVal on the request's resource, subresource, namespace
// and name).
func newAuthorizerVal(u *userInfo, authorize authorizerFunc) authorizerVal {
	return authorizerVal{receiverOnly: receiverOnlyVal(authorizerType), user: u, authorize: authorize}
}

func newRequestResourceVal(a authorizerVal, attrs *attrs) resourceCheckVal {
	r := a.groupCheck(attrs.resourceGroup).resourceCheck(attrs.resource)
	r.subresource, r.namespace, r.name = attrs.subResource, attrs.namespace, attrs.name
	return r
}

type authorizerVal struct {
	receiverOnly
	user      *userInfo
	authorize authorizerFunc
}

func (a authorizerVal) groupCheck(group string) groupCheckVal {
	return groupCheckVal{receiverOnly: receiverOnlyVal(groupCheckType), authorizer: a, group: group}
}

type pathCheckVal struct {
	receiverOnly
	authorizer authorizerVal
	path       string
}

type groupCheckVal struct {
	receiverOnly
	authorizer authorizerVal
	group      string
}

func (g groupCheckVal) resourceCheck(resource string) resourceCheckVal {
	return resourceCheckVal{receiverOnly: receiverOnlyVal(resourceCheckType), groupCheck: g, resource: resource}
}

type resourceCheckVal struct {
	receiverOnly
	groupCheck                   groupCheckVal
	resource, subresource        string
	namespace, name              string
	fieldSelector, labelSelector string
}

type decisionVal struct {
	receiverOnly
	decision decision
	reason   string
	err      error
}

func newDecisionVal(d decision, reason string, err error) decisionVal {
	return decisionVal{receiverOnly: receiverOnlyVal(decisionType), decision: d, reason: reason, err: err}
}

// receiverOnly is the library's receiverOnlyObjectVal: a value that is only
// a receiver of its functions (no conversions; equal only to itself as a
// bare receiver, which no expression can produce).
type receiverOnly struct{ typeValue *types.Type }

func receiverOnlyVal(t *cel.Type) receiverOnly {
	return receiverOnly{typeValue: types.NewTypeValue(t.String())}
}

func (a receiverOnly) ConvertToNative(typeDesc reflect.Type) (any, error) {
	return nil, fmt.Errorf("type conversion error from '%s' to '%v'", a.typeValue.String(), typeDesc)
}

func (a receiverOnly) ConvertToType(typeVal ref.Type) ref.Val {
	switch typeVal {
	case a.typeValue:
		return a
	case types.TypeType:
		return a.typeValue
	}
	return types.NewErr("type conversion error from '%s' to '%s'", a.typeValue, typeVal)
}

func (a receiverOnly) Equal(other ref.Val) ref.Val {
	o, ok := other.(receiverOnly)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	return types.Bool(a == o)
}

func (a receiverOnly) Type() ref.Type { return a.typeValue }

func (a receiverOnly) Value() any { return types.NoSuchOverloadErr() }

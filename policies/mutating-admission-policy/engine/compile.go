package engine

import (
	"fmt"

	"github.com/google/cel-go/cel"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"
)

// compilePolicy builds the evaluator the apiserver builds for a policy (the
// same compiler, environment, options and patchers, in the same order) and
// also returns every compilation error with the field it came from, which the
// apiserver reports when the policy is created.
func compilePolicy(p *admissionregistrationv1.MutatingAdmissionPolicy) (policyEvaluator, field.ErrorList) {
	spec := field.NewPath("spec")
	opts := plugincel.OptionalVariableDeclarations{HasParams: p.Spec.ParamKind != nil, HasAuthorizer: true}
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return policyEvaluator{}, field.ErrorList{field.InternalError(spec, fmt.Errorf("failed to initialize CEL compiler: %w", err))}
	}
	var errs field.ErrorList

	for i, v := range p.Spec.Variables {
		res := compiler.CompileAndStoreVariable(&variable{name: v.Name, expression: v.Expression}, opts, environment.StoredExpressions)
		if res.Error != nil {
			errs = append(errs, field.Invalid(spec.Child("variables").Index(i).Child("expression"), v.Expression, res.Error.Detail))
		}
	}

	var matcher matchconditions.Matcher
	if conds := p.Spec.MatchConditions; len(conds) > 0 {
		accessors := make([]plugincel.ExpressionAccessor, len(conds))
		for i := range conds {
			accessors[i] = (*matchconditions.MatchCondition)(&conds[i])
		}
		evaluator := compiler.CompileCondition(accessors, opts, environment.StoredExpressions)
		if len(evaluator.CompilationErrors()) > 0 {
			// Compile one by one to tell which condition is at fault.
			for i := range conds {
				res := compiler.CompileCELExpression(accessors[i], opts, environment.StoredExpressions)
				if res.Error != nil {
					errs = append(errs, field.Invalid(spec.Child("matchConditions").Index(i).Child("expression"), conds[i].Expression, res.Error.Detail))
				}
			}
		}
		matcher = matchconditions.NewMatcher(evaluator, p.Spec.FailurePolicy, "policy", "validate", p.Name)
	}

	patchOpts := opts
	patchOpts.HasPatchTypes = true
	var patchers []patch.Patcher
	for i, m := range p.Spec.Mutations {
		mp := spec.Child("mutations").Index(i)
		switch m.PatchType {
		case admissionregistrationv1.PatchTypeJSONPatch:
			if m.JSONPatch != nil {
				ev := compiler.CompileMutatingEvaluator(&patch.JSONPatchCondition{Expression: m.JSONPatch.Expression}, patchOpts, environment.StoredExpressions)
				for _, e := range ev.CompilationErrors() {
					errs = append(errs, field.Invalid(mp.Child("jsonPatch", "expression"), m.JSONPatch.Expression, e.Error()))
				}
				patchers = append(patchers, patch.NewJSONPatcher(ev))
			}
		case admissionregistrationv1.PatchTypeApplyConfiguration:
			if m.ApplyConfiguration != nil {
				ev := compiler.CompileMutatingEvaluator(&patch.ApplyConfigurationCondition{Expression: m.ApplyConfiguration.Expression}, patchOpts, environment.StoredExpressions)
				for _, e := range ev.CompilationErrors() {
					errs = append(errs, field.Invalid(mp.Child("applyConfiguration", "expression"), m.ApplyConfiguration.Expression, e.Error()))
				}
				patchers = append(patchers, patch.NewApplyConfigurationPatcher(ev))
			}
		}
	}
	return policyEvaluator{matcher: matcher, patchers: patchers, compiler: compiler}, errs
}

// policyEvaluator is what the apiserver compiles a policy into.
type policyEvaluator struct {
	matcher  matchconditions.Matcher
	patchers []patch.Patcher
	compiler *plugincel.CompositedCompiler
}

// variable is a spec.variables entry; like the apiserver's, it may return any type.
type variable struct{ name, expression string }

func (v *variable) GetExpression() string    { return v.expression }
func (v *variable) ReturnTypes() []*cel.Type { return []*cel.Type{cel.AnyType, cel.DynType} }
func (v *variable) GetName() string          { return v.name }

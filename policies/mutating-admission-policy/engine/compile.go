package engine

import (
	"context"
	"fmt"

	"github.com/google/cel-go/cel"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
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
	var conditions []plugincel.CompilationResult
	if conds := p.Spec.MatchConditions; len(conds) > 0 {
		accessors := make([]plugincel.ExpressionAccessor, len(conds))
		for i := range conds {
			accessors[i] = (*matchconditions.MatchCondition)(&conds[i])
		}
		// compiler.CompileCondition compiles each condition with
		// CompileCELExpression and wraps them in a condition evaluator that
		// creates a composition context per evaluation: the same is done
		// here, keeping the compiled programs for the fast path.
		conditions = make([]plugincel.CompilationResult, len(conds))
		for i := range conds {
			conditions[i] = compiler.CompileCELExpression(accessors[i], opts, environment.StoredExpressions)
			if res := conditions[i]; res.Error != nil {
				errs = append(errs, field.Invalid(spec.Child("matchConditions").Index(i).Child("expression"), conds[i].Expression, res.Error.Detail))
			}
		}
		evaluator := compositedCondition{ConditionEvaluator: plugincel.NewCondition(conditions), compiler: compiler}
		matcher = matchconditions.NewMatcher(evaluator, p.Spec.FailurePolicy, "policy", "validate", p.Name)
	}

	patchOpts := opts
	patchOpts.HasPatchTypes = true
	var patchers []patch.Patcher
	var mutations []compiledMutation
	for i, m := range p.Spec.Mutations {
		mp := spec.Child("mutations").Index(i)
		switch m.PatchType {
		case admissionregistrationv1.PatchTypeJSONPatch:
			if m.JSONPatch != nil {
				res := compiler.CompileCELExpression(&patch.JSONPatchCondition{Expression: m.JSONPatch.Expression}, patchOpts, environment.StoredExpressions)
				ev := plugincel.NewMutatingEvaluator(res)
				for _, e := range ev.CompilationErrors() {
					errs = append(errs, field.Invalid(mp.Child("jsonPatch", "expression"), m.JSONPatch.Expression, e.Error()))
				}
				patchers = append(patchers, patch.NewJSONPatcher(ev))
				mutations = append(mutations, compiledMutation{kind: mutationJSONPatch, result: res})
			}
		case admissionregistrationv1.PatchTypeApplyConfiguration:
			if m.ApplyConfiguration != nil {
				res := compiler.CompileCELExpression(&patch.ApplyConfigurationCondition{Expression: m.ApplyConfiguration.Expression}, patchOpts, environment.StoredExpressions)
				ev := plugincel.NewMutatingEvaluator(res)
				for _, e := range ev.CompilationErrors() {
					errs = append(errs, field.Invalid(mp.Child("applyConfiguration", "expression"), m.ApplyConfiguration.Expression, e.Error()))
				}
				patchers = append(patchers, patch.NewApplyConfigurationPatcher(ev))
				mutations = append(mutations, compiledMutation{kind: mutationApply, result: res})
			}
		}
	}
	return policyEvaluator{matcher: matcher, patchers: patchers, compiler: compiler, conditions: conditions, mutations: mutations}, errs
}

// policyEvaluator is what the apiserver compiles a policy into, with the
// compiled programs also kept for the fast path (fasteval.go): conditions
// in the order of spec.matchConditions, mutations parallel to patchers.
//
// The apiserver's CompileMutatingEvaluator is CompileCELExpression wrapped in
// NewMutatingEvaluator (its composited wrapper adds no behaviour), so the
// programs are compiled once and shared by both paths.
type policyEvaluator struct {
	matcher    matchconditions.Matcher
	patchers   []patch.Patcher
	compiler   *plugincel.CompositedCompiler
	conditions []plugincel.CompilationResult
	mutations  []compiledMutation
}

type mutationKind int

const (
	mutationJSONPatch mutationKind = iota
	mutationApply
)

type compiledMutation struct {
	kind   mutationKind
	result plugincel.CompilationResult
}

// compositedCondition is the apiserver's CompositedConditionEvaluator: each
// evaluation of the conditions gets a composition context of its own.
type compositedCondition struct {
	plugincel.ConditionEvaluator
	compiler *plugincel.CompositedCompiler
}

func (c compositedCondition) ForInput(ctx context.Context, versionedAttr *admission.VersionedAttributes, request *admissionv1.AdmissionRequest, optionalVars plugincel.OptionalVariableBindings, namespace *corev1.Namespace, runtimeCELCostBudget int64) ([]plugincel.EvaluationResult, int64, error) {
	return c.ConditionEvaluator.ForInput(c.compiler.CreateContext(ctx), versionedAttr, request, optionalVars, namespace, runtimeCELCostBudget)
}

// variable is a spec.variables entry; like the apiserver's, it may return any type.
type variable struct{ name, expression string }

func (v *variable) GetExpression() string    { return v.expression }
func (v *variable) ReturnTypes() []*cel.Type { return []*cel.Type{cel.AnyType, cel.DynType} }
func (v *variable) GetName() string          { return v.name }

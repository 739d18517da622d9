package jsonengine

import (
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/traits"

	celconfig "k8s.io/apiserver/pkg/apis/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
)

// compiled is one compiled expression, or the error the apiserver's
// compiler reports for it (CompileCELExpression).
type compiled struct {
	expression string
	program    cel.Program
	outputType *cel.Type
	err        error
}

type compiledVariable struct {
	name string
	compiled
}

type compiledMutation struct {
	patchType string // JSONPatch or ApplyConfiguration
	compiled
}

// compileExpression is the apiserver's CompileCELExpression: compile, check
// the output type against the allowed ones, make the program.
func compileExpression(env *cel.Env, expr string, returnTypes ...*cel.Type) compiled {
	c := compiled{expression: expr}
	ast, iss := env.Compile(expr)
	if iss != nil {
		c.err = fmt.Errorf("compilation failed: %s", iss.String())
		return c
	}
	found := false
	for _, t := range returnTypes {
		if ast.OutputType().IsExactType(t) || cel.AnyType.IsExactType(t) {
			found = true
			break
		}
	}
	if !found {
		if len(returnTypes) == 1 {
			c.err = fmt.Errorf("must evaluate to %v but got %v", returnTypes[0].String(), ast.OutputType().String())
		} else {
			c.err = fmt.Errorf("must evaluate to one of %v but got %v", returnTypes, ast.OutputType().String())
		}
		return c
	}
	if _, err := cel.AstToCheckedExpr(ast); err != nil {
		c.err = fmt.Errorf("unexpected compilation error: %v", err)
		return c
	}
	prg, err := env.Program(ast, cel.InterruptCheckFrequency(celconfig.CheckFrequency))
	if err != nil {
		c.err = fmt.Errorf("program instantiation failed: %v", err)
		return c
	}
	c.program, c.outputType = prg, ast.OutputType()
	return c
}

var (
	applyConfigurationType = types.NewObjectType(objectTypeName)
	jsonPatchListType      = cel.ListType(jsonPatchType)
)

// compilePolicy compiles the variables, match conditions and mutations of
// p in the apiserver's order, and returns every compilation error with its
// field, as the apiserver reports them when the policy is created.
func (e *Engine) compilePolicy(p *policy) error {
	variablesType := apiservercel.NewObjectType("kubernetes.variables", map[string]*apiservercel.DeclField{})
	e.variablesType = variablesType
	env, _, err := newEnv(p.Spec.ParamKind != nil, variablesType)
	if err != nil {
		return fmt.Errorf("failed to initialize CEL compiler: %w", err)
	}
	var errs []string
	invalid := func(path, expr string, err error) {
		errs = append(errs, fmt.Sprintf("%s: Invalid value: %q: %v", path, expr, err))
	}
	for i, v := range p.Spec.Variables {
		c := compileExpression(env, v.Expression, cel.AnyType, cel.DynType)
		variablesType.Fields[v.Name] = apiservercel.NewDeclField(v.Name, declTypeOf(c.outputType), true, nil, nil)
		e.variables = append(e.variables, compiledVariable{name: v.Name, compiled: c})
		if c.err != nil {
			invalid(fmt.Sprintf("spec.variables[%d].expression", i), v.Expression, c.err)
		}
	}
	for i, mc := range p.Spec.MatchConditions {
		c := compileExpression(env, mc.Expression, cel.BoolType)
		e.conditions = append(e.conditions, namedCompiled{name: mc.Name, compiled: c})
		if c.err != nil {
			invalid(fmt.Sprintf("spec.matchConditions[%d].expression", i), mc.Expression, c.err)
		}
	}
	for i, m := range p.Spec.Mutations {
		switch m.PatchType {
		case "JSONPatch":
			if m.JSONPatch != nil {
				c := compileExpression(env, m.JSONPatch.Expression, jsonPatchListType)
				e.mutations = append(e.mutations, compiledMutation{patchType: m.PatchType, compiled: c})
				if c.err != nil {
					invalid(fmt.Sprintf("spec.mutations[%d].jsonPatch.expression", i), m.JSONPatch.Expression, c.err)
				}
			}
		case "ApplyConfiguration":
			if m.ApplyConfiguration != nil {
				c := compileExpression(env, m.ApplyConfiguration.Expression, applyConfigurationType)
				e.mutations = append(e.mutations, compiledMutation{patchType: m.PatchType, compiled: c})
				if c.err != nil {
					invalid(fmt.Sprintf("spec.mutations[%d].applyConfiguration.expression", i), m.ApplyConfiguration.Expression, c.err)
				}
			}
		}
	}
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%w: MutatingAdmissionPolicy %q: %s", ErrInvalidSettings, p.Name, errs[0])
	}
	return fmt.Errorf("%w: MutatingAdmissionPolicy %q: [%s]", ErrInvalidSettings, p.Name, strings.Join(errs, ", "))
}

type namedCompiled struct {
	name string
	compiled
}

// declTypeOf is the apiserver's convertCelTypeToDeclType: the declared type
// of a composited variable's field from its expression's output type.
func declTypeOf(t *cel.Type) *apiservercel.DeclType {
	if t == nil {
		return apiservercel.DynType
	}
	switch t {
	case cel.AnyType:
		return apiservercel.AnyType
	case cel.BoolType:
		return apiservercel.BoolType
	case cel.BytesType:
		return apiservercel.BytesType
	case cel.DoubleType:
		return apiservercel.DoubleType
	case cel.DurationType:
		return apiservercel.DurationType
	case cel.IntType:
		return apiservercel.IntType
	case cel.NullType:
		return apiservercel.NullType
	case cel.StringType:
		return apiservercel.StringType
	case cel.TimestampType:
		return apiservercel.TimestampType
	case cel.UintType:
		return apiservercel.UintType
	}
	if t.HasTrait(traits.ContainerType) && t.HasTrait(traits.IndexerType) {
		switch p := t.Parameters(); len(p) {
		case 1:
			return apiservercel.NewListType(declTypeOf(p[0]), -1)
		case 2:
			return apiservercel.NewMapType(declTypeOf(p[0]), declTypeOf(p[1]), -1)
		}
	}
	return apiservercel.DynType
}

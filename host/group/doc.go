// Package group parses and evaluates the boolean expressions of policy
// groups: member names called as functions combined with &&, || and !, and
// parentheses, e.g. `a() && (b() || !c())`.
//
// Evaluation is lazy with short-circuit: a member is evaluated only when its
// value decides the result, and at most once per evaluation. The package
// knows nothing of policies, Wasm or admission; callers supply a function
// that evaluates a member by name.
package group

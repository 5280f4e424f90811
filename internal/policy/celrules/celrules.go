// Package celrules evaluates a policy's `when` expressions with CEL. A
// program that imports it (the complete airlock) can run policies with
// rules and tiers; the airlock front does not, and hands such a run to the
// complete airlock: CEL's package initialisation alone cost every start
// of airlock about a millisecond (docs/decisions.md, 37 and 47).
//
//	import _ "github.com/airlock-sandbox/airlock/internal/policy/celrules"
package celrules

import (
	"context"
	"fmt"

	"github.com/google/cel-go/cel"

	"github.com/airlock-sandbox/airlock/internal/policy"
)

func init() { policy.UseCompiler(newCompiler) }

// newCompiler makes the CEL environment of rules and tiers and returns
// what compiles one expression.
func newCompiler() (func(what, expr string) (policy.Condition, error), error) {
	env, err := celEnv()
	if err != nil {
		return nil, fmt.Errorf("make CEL environment: %w", err)
	}
	return func(what, expr string) (policy.Condition, error) {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			return nil, fmt.Errorf("%s: %w", what, iss.Err())
		}
		if ast.OutputType() != cel.BoolType {
			return nil, fmt.Errorf("%s: when is %s, not a bool", what, ast.OutputType())
		}
		prg, err := env.Program(ast, cel.CostLimit(policy.MaxRuleCost))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return celCondition{prg}, nil
	}, nil
}

// celCondition is a compiled CEL expression.
type celCondition struct{ prg cel.Program }

func (c celCondition) Holds(ctx context.Context, vars map[string]any) (bool, error) {
	out, _, err := c.prg.ContextEval(ctx, vars)
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	return ok && b, nil
}

func celEnv() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("action", cel.StringType),
		cel.Variable("sandbox", cel.StringType),
		cel.Variable("template", cel.StringType),
		cel.Variable("driver", cel.StringType),
		cel.Variable("argv", cel.ListType(cel.StringType)),
		cel.Variable("code", cel.StringType),
		cel.Variable("language", cel.StringType),
		cel.Variable("path", cel.StringType),
		cel.Variable("host", cel.StringType),
		cel.Variable("port", cel.IntType),
		cel.Variable("method", cel.StringType),
		cel.Variable("key", cel.StringType),
		cel.Variable("limits", cel.MapType(cel.StringType, cel.DoubleType)),
		cel.Variable("network", cel.StringType),
		cel.Variable("explicit", cel.BoolType),
		cel.Variable("labels", cel.MapType(cel.StringType, cel.StringType)),
	)
}

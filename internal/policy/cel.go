//go:build !front

package policy

import (
	"context"
	"fmt"

	"github.com/google/cel-go/cel"
)

// The policy's `when` expressions are CEL. The airlock front (the small
// program that runs one-shot sandboxes, docs/decisions.md) is built
// without this file: CEL's package initialisation alone cost every start
// of airlock about a millisecond.

// newCompiler makes the CEL environment of rules and tiers and returns
// what compiles one expression.
func newCompiler() (func(what, expr string) (condition, error), error) {
	env, err := celEnv()
	if err != nil {
		return nil, fmt.Errorf("make CEL environment: %w", err)
	}
	return func(what, expr string) (condition, error) {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			return nil, fmt.Errorf("%s: %w", what, iss.Err())
		}
		if ast.OutputType() != cel.BoolType {
			return nil, fmt.Errorf("%s: when is %s, not a bool", what, ast.OutputType())
		}
		prg, err := env.Program(ast, cel.CostLimit(maxRuleCost))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return celCondition{prg}, nil
	}, nil
}

// celCondition is a compiled CEL expression.
type celCondition struct{ prg cel.Program }

func (c celCondition) holds(ctx context.Context, vars map[string]any) (bool, error) {
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
		cel.Variable("key", cel.StringType),
		cel.Variable("limits", cel.MapType(cel.StringType, cel.DoubleType)),
		cel.Variable("network", cel.StringType),
		cel.Variable("explicit", cel.BoolType),
		cel.Variable("labels", cel.MapType(cel.StringType, cel.StringType)),
	)
}

package profile

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/internal/pipeline"
)

// costLimit bounds one evaluation of any expression; a profile cannot make
// the manager spin.
const costLimit = 100000

// celEnv declares the variables expressions see: `call` (tool, args,
// requester, session, turn, index), `args` (the arguments, for classifiers)
// and `result` (value, content; post-execute rules only).
func celEnv() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("call", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("args", cel.DynType),
		cel.Variable("result", cel.MapType(cel.StringType, cel.DynType)),
		// The string helpers Kubernetes CEL offers (lowerAscii, split, ...).
		ext.Strings(),
	)
}

// program is a compiled expression.
type program struct {
	prg cel.Program
}

// compileExpr compiles expr; want is the result type (nil for any).
func compileExpr(env *cel.Env, expr string, want *cel.Type) (*program, error) {
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if want != nil && ast.OutputType() != cel.DynType && !ast.OutputType().IsExactType(want) {
		return nil, fmt.Errorf("must evaluate to %s, not %s", want, ast.OutputType())
	}
	prg, err := env.Program(ast, cel.CostLimit(costLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, err
	}
	return &program{prg: prg}, nil
}

func (p *program) eval(vars map[string]any) (ref.Val, error) {
	out, _, err := p.prg.Eval(vars)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// evalBool is true only for the exact boolean true.
func (p *program) evalBool(vars map[string]any) (bool, error) {
	out, err := p.eval(vars)
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("evaluated to %s, not bool", out.Type())
	}
	return b, nil
}

// evalJSON evaluates to a JSON value (for replaceValue).
func (p *program) evalJSON(vars map[string]any) (json.RawMessage, error) {
	out, err := p.eval(vars)
	if err != nil {
		return nil, err
	}
	if types.IsError(out) {
		return nil, fmt.Errorf("%v", out)
	}
	pb, err := out.ConvertToNative(reflect.TypeOf(&structpb.Value{}))
	if err != nil {
		return nil, err
	}
	return protojson.Marshal(pb.(*structpb.Value))
}

// celNumber converts a JSON number into CEL's types: an integer that fits
// int64 becomes int, any other number double.
func celNumber(n json.Number) any {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return math.NaN()
	}
	return f
}

// callVars is the `call` variable for a pipeline call.
func callVars(c pipeline.Call) map[string]any {
	return map[string]any{
		"call": map[string]any{
			"tool": c.Tool, "args": c.Args.Copy(celNumber), "requester": c.Requester,
			"session": c.Session, "turn": c.Turn, "index": int64(c.Index),
		},
	}
}

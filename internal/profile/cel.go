package profile

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/ext"

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
		// The string helpers Kubernetes CEL offers (lowerAscii, split, ...),
		// and regular expressions (regex.replace, regex.extract: RE2, so
		// linear in the input, and within the cost limit).
		ext.Strings(),
		cel.OptionalTypes(),
		ext.Regex(),
	)
}

// program is a compiled expression.
type program struct {
	prg cel.Program
	ast *cel.Ast
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
	return &program{prg: prg, ast: ast}, nil
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
	var b strings.Builder
	if err := appendJSON(&b, out, 0); err != nil {
		return nil, err
	}
	return json.RawMessage(b.String()), nil
}

// exactDouble is the largest magnitude up to which every integer is a
// double exactly.
const exactDouble = 1 << 53

// appendJSON writes a CEL value as JSON text, numbers exactly as CEL holds
// them: an int or uint as its digits (never through a double), a double
// as its shortest text. An integral double beyond 2^53 (a number too large
// for int64 reaches CEL as a double, already rounded) is refused: passing
// it on would commit a number other than the one the tool returned.
func appendJSON(b *strings.Builder, v ref.Val, depth int) error {
	if depth > 64 {
		return errors.New("the value is nested more than 64 levels deep")
	}
	switch v := v.(type) {
	case *types.Err:
		// A number no double holds (celNumber), carried through whole.
		return errors.New("a number cannot pass through CEL exactly (more digits than a double holds, or beyond its range)")
	case types.Null:
		b.WriteString("null")
	case types.Bool:
		b.WriteString(strconv.FormatBool(bool(v)))
	case types.Int:
		b.WriteString(strconv.FormatInt(int64(v), 10))
	case types.Uint:
		b.WriteString(strconv.FormatUint(uint64(v), 10))
	case types.Double:
		f := float64(v)
		switch {
		case math.IsNaN(f) || math.IsInf(f, 0):
			return fmt.Errorf("%v is not a JSON number", f)
		case f == math.Trunc(f) && math.Abs(f) > exactDouble:
			return fmt.Errorf("the number %g cannot pass through CEL exactly (CEL holds integers within int64, and other numbers as doubles, exact to 2^53)", f)
		}
		b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	case types.String:
		text, err := json.Marshal(string(v))
		if err != nil {
			return err
		}
		b.Write(text)
	case traits.Lister:
		b.WriteByte('[')
		for i, it := 0, v.Iterator(); it.HasNext() == types.True; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := appendJSON(b, it.Next(), depth+1); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case traits.Mapper:
		b.WriteByte('{')
		for i, it := 0, v.Iterator(); it.HasNext() == types.True; i++ {
			k := it.Next()
			key, ok := k.(types.String)
			if !ok {
				return fmt.Errorf("a map key of type %s is not a JSON object key", k.Type())
			}
			if i > 0 {
				b.WriteByte(',')
			}
			text, err := json.Marshal(string(key))
			if err != nil {
				return err
			}
			b.Write(text)
			b.WriteByte(':')
			if err := appendJSON(b, v.Get(k), depth+1); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("a value of type %s is not JSON", v.Type())
	}
	return nil
}

// celNumber converts a JSON number into CEL's types: an integer that fits
// int64 becomes int, any other number double when the double is that
// number (its shortest decimal is the number's: 0.5, 0.1, 1e2). A number
// no double is (more digits than it holds, beyond its range) is an error a
// rule meets only if it reads it: a rule must never decide on a rounded
// value while the body reads the exact one.
func celNumber(n json.Number) any {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || !sameNumber(string(n), f) {
		return types.NewErr(inexactNumber)
	}
	return f
}

// inexactNumber is the error of a number a rule cannot read exactly; it
// names no value (arguments stay out of reasons and logs).
const inexactNumber = "inexact number: a rule cannot read this number exactly (more digits than a double holds, or beyond its range)"

// sameNumber reports whether the decimal text and f are one number: f's
// shortest decimal has the text's value.
func sameNumber(text string, f float64) bool {
	want, ok := new(big.Rat).SetString(text)
	if !ok || math.IsInf(f, 0) || math.IsNaN(f) {
		return false
	}
	got, ok := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
	return ok && got.Cmp(want) == 0
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

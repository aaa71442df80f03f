package profile

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// variable is what an expression may read of one of celEnv's variables:
// its fields (nil: any, as for args, a JSON object), and the field holding
// a JSON value a tool's schema describes ("" when the variable itself is
// one), with the schemas that describe it.
type variable struct {
	fields []string
	json   string
	output bool // the JSON value is a result's (the output schema), not the arguments
}

// variables are celEnv's, as expressions see them; reading anything else
// is a mistake the profile is refused for, never a rule that fails each
// call.
var variables = map[string]variable{
	"call":   {fields: []string{"tool", "args", "requester", "session", "turn", "index"}, json: "args"},
	"result": {fields: []string{"value", "content"}, json: "value", output: true},
	"args":   {},
}

// read is one chain of constant field names an expression reads from a
// variable: call.args.path is {call, [args, path]}.
type read struct {
	root   string
	fields []string
}

func (r read) String() string { return strings.Join(append([]string{r.root}, r.fields...), ".") }

// reads returns the chains of constant field names expr reads from the
// variables named (field selection, has(), optional selection, and
// indexing with a constant string); a chain ends at the first step that is
// not a constant name.
func reads(a *cel.Ast, roots ...string) []read {
	var out []read
	seen := map[string]bool{}
	ast.PreOrderVisit(a.NativeRep().Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		r, ok := chain(e)
		if !ok || !slices.Contains(roots, r.root) || seen[r.String()] {
			return
		}
		seen[r.String()] = true
		out = append(out, r)
	}))
	return out
}

// chain reads e as a variable followed by constant field names.
func chain(e ast.Expr) (read, bool) {
	switch e.Kind() {
	case ast.IdentKind:
		return read{root: e.AsIdent()}, true
	case ast.SelectKind:
		s := e.AsSelect()
		r, ok := chain(s.Operand())
		if !ok {
			return read{}, false
		}
		return read{root: r.root, fields: append(slices.Clip(r.fields), s.FieldName())}, true
	case ast.CallKind:
		c := e.AsCall()
		fn := c.FunctionName()
		if (fn != operators.Index && fn != operators.OptSelect && fn != operators.OptIndex) || len(c.Args()) != 2 {
			return read{}, false
		}
		lit := c.Args()[1]
		if lit.Kind() != ast.LiteralKind {
			return read{}, false
		}
		name, ok := lit.AsLiteral().Value().(string)
		if !ok {
			return read{}, false
		}
		r, ok := chain(c.Args()[0])
		if !ok {
			return read{}, false
		}
		return read{root: r.root, fields: append(slices.Clip(r.fields), name)}, true
	}
	return read{}, false
}

// presence is what a schema says of a field path.
type presence int

const (
	// absent: the schema allows no such field.
	absent presence = iota
	// undeclared: the schema does not name it but allows other fields.
	undeclared
	// declared: the schema names it.
	declared
)

// lookup says whether a JSON Schema (parsed) declares the object field
// path.
func lookup(schema any, path []string) presence {
	node := schema
	for _, f := range path {
		m, ok := node.(map[string]any)
		if !ok {
			return undeclared // true, or a schema we do not read
		}
		if props, ok := m["properties"].(map[string]any); ok {
			if sub, ok := props[f]; ok {
				node = sub
				continue
			}
		}
		if closed(m) {
			return absent
		}
		return undeclared
	}
	return declared
}

// closed is true for a schema that admits only the properties it names:
// additionalProperties false, or a type that has no fields; anything that
// may add properties (combinators, references, patterns) keeps it open.
func closed(m map[string]any) bool {
	for _, k := range []string{"allOf", "anyOf", "oneOf", "$ref", "$dynamicRef", "if", "patternProperties", "dependentSchemas"} {
		if _, ok := m[k]; ok {
			return false
		}
	}
	if t, ok := m["type"].(string); ok && t != "object" {
		return true
	}
	if m["additionalProperties"] == false {
		return true
	}
	return m["unevaluatedProperties"] == false
}

// schemas are the parsed parameters and output schemas of a profile's
// tools, by name.
type schemas struct {
	names  []string
	params map[string]any
	output map[string]any
}

func schemasOf(spec *toolgatev1alpha1.ToolProfileSpec) schemas {
	s := schemas{params: map[string]any{}, output: map[string]any{}}
	for _, t := range spec.Tools {
		s.names = append(s.names, t.Name)
		if doc, err := pipeline.ParseJSON(string(t.Parameters.Raw)); err == nil {
			s.params[t.Name] = doc
		}
		if doc, err := pipeline.ParseJSON(string(t.Output.Schema.Raw)); err == nil {
			s.output[t.Name] = doc
		}
	}
	return s
}

// checkReads checks what an expression reads against the variables bound
// where it runs (vars) and, for call.args / args / result.value, against
// the schemas of the tools it applies to (all when tools is empty). A
// variable not bound there, a field no variable has, or one that every such
// schema refuses is an error; one that no schema declares but some allow is
// a warning (it may be there when a call runs).
func (s schemas) checkReads(a *cel.Ast, tools []string, vars ...string) (warnings []string, err error) {
	if len(tools) == 0 {
		tools = s.names
	}
	for _, r := range reads(a, slices.Collect(maps.Keys(variables))...) {
		if !slices.Contains(vars, r.root) {
			return nil, fmt.Errorf("reads %s, but only %s is bound here", r, strings.Join(vars, " and "))
		}
		if len(r.fields) == 0 {
			continue
		}
		v := variables[r.root]
		path := r.fields
		if v.fields != nil {
			if !slices.Contains(v.fields, path[0]) {
				return nil, fmt.Errorf("reads %s, but %s has only the fields %s", r, r.root, strings.Join(v.fields, ", "))
			}
			if path[0] != v.json {
				continue
			}
			path = path[1:]
		}
		if len(path) == 0 {
			continue
		}
		docs, what := s.params, "parameters"
		if v.output {
			docs, what = s.output, "output schema"
		}
		best, known := absent, false
		for _, t := range tools {
			doc, ok := docs[t]
			if !ok {
				continue
			}
			known = true
			best = max(best, lookup(doc, path))
		}
		switch {
		case !known || best == declared:
		case best == absent:
			return nil, fmt.Errorf("reads %s, a field the %s of %s do not have (they allow no other field)", r, what, toolList(tools))
		default:
			warnings = append(warnings, fmt.Sprintf("reads %s, a field the %s of %s do not declare (they allow other fields, so only a call can tell)", r, what, toolList(tools)))
		}
	}
	return warnings, nil
}

// toolList names tools for a message: "tool write" or "tools a, b".
func toolList(tools []string) string {
	if len(tools) == 1 {
		return "tool " + tools[0]
	}
	if len(tools) > 5 {
		return fmt.Sprintf("tools %s and %d more", strings.Join(tools[:5], ", "), len(tools)-5)
	}
	return "tools " + strings.Join(tools, ", ")
}

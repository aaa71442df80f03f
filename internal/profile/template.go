package profile

import (
	"errors"
	"fmt"
	"iter"
	"reflect"
	"sort"
	"text/template"
	"text/template/parse"
)

// Templates run inside the manager on every call whose profile uses them,
// so, like CEL expressions (which have a cost limit), they run on a
// budget: at most templateIterations iterations of range, over all the
// ranges of one execution, and at most templateOutput bytes of output. A
// template may not define or call templates (recursion has no bound).
// Without ranges and calls, a template's work is bounded by its own size.
const (
	templateIterations = 100_000
	templateOutput     = 2 << 20
)

// Names of the functions every range is rewritten to go through.
const (
	rangeOne = "toolgateRangeValues"
	rangeTwo = "toolgateRangePairs"
)

var (
	errTemplateIterations = fmt.Errorf("the template ran more than %d range iterations", templateIterations)
	errTemplateOutput     = fmt.Errorf("the template's output exceeds %d bytes", templateOutput)
)

// parseTemplate parses a profile's template and puts every range on the
// execution's budget.
func parseTemplate(name, text string) (*template.Template, error) {
	tpl, err := template.New(name).Option("missingkey=error").Funcs((&budget{}).funcs()).Parse(text)
	if err != nil {
		return nil, err
	}
	if len(tpl.Templates()) > 1 {
		return nil, errors.New("a profile's template may not define templates")
	}
	if err := budgetRanges(tpl.Tree, tpl.Root); err != nil {
		return nil, err
	}
	return tpl, nil
}

// runTemplate executes tpl on data within its budget.
func runTemplate(tpl *template.Template, data any) (string, error) {
	b := &budget{left: templateIterations}
	run, err := tpl.Clone()
	if err != nil {
		return "", err
	}
	out := &boundedOutput{}
	err = run.Funcs(b.funcs()).Execute(out, data)
	switch {
	case b.exceeded:
		return "", errTemplateIterations
	case out.exceeded:
		return "", errTemplateOutput
	case err != nil:
		return "", err
	}
	return string(out.buf), nil
}

// budgetRanges rewrites every range of the tree to iterate through the
// budget ({{range PIPELINE}} becomes {{range PIPELINE | toolgateRange…}}),
// and refuses template calls.
func budgetRanges(tree *parse.Tree, n parse.Node) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := budgetRanges(tree, c); err != nil {
				return err
			}
		}
	case *parse.IfNode:
		return branches(tree, &n.BranchNode)
	case *parse.WithNode:
		return branches(tree, &n.BranchNode)
	case *parse.RangeNode:
		fn := rangeOne
		if len(n.Pipe.Decl) == 2 {
			fn = rangeTwo
		}
		id := parse.NewIdentifier(fn).SetTree(tree).SetPos(n.Pos)
		n.Pipe.Cmds = append(n.Pipe.Cmds, &parse.CommandNode{NodeType: parse.NodeCommand, Pos: n.Pos, Args: []parse.Node{id}})
		return branches(tree, &n.BranchNode)
	case *parse.TemplateNode:
		return errors.New("a profile's template may not call templates")
	}
	return nil
}

func branches(tree *parse.Tree, b *parse.BranchNode) error {
	if err := budgetRanges(tree, b.List); err != nil {
		return err
	}
	return budgetRanges(tree, b.ElseList)
}

// budget counts one execution's range iterations.
type budget struct {
	left     int
	exceeded bool
}

func (b *budget) funcs() template.FuncMap {
	return template.FuncMap{rangeOne: b.values, rangeTwo: b.pairs}
}

// take spends one iteration, or reports the budget exhausted.
func (b *budget) take() bool {
	if b.left == 0 {
		b.exceeded = true
		return false
	}
	b.left--
	return true
}

// values iterates what range would with one variable or none: a slice's or
// array's elements, a map's values in key order, 0…n-1 of an integer n.
func (b *budget) values(v any) (iter.Seq[any], error) {
	rv, keys, err := rangeable(v, false)
	if err != nil {
		return nil, err
	}
	return func(yield func(any) bool) {
		switch {
		case rv.Kind() >= reflect.Int && rv.Kind() <= reflect.Int64:
			for i := range rv.Int() {
				if !b.take() || !yield(int(i)) {
					return
				}
			}
		case keys != nil:
			for _, k := range keys {
				if !b.take() || !yield(rv.MapIndex(k).Interface()) {
					return
				}
			}
		default:
			for i := range rv.Len() {
				if !b.take() || !yield(rv.Index(i).Interface()) {
					return
				}
			}
		}
	}, nil
}

// pairs iterates what range would with two variables: a slice's or array's
// indexes and elements, a map's keys and values in key order.
func (b *budget) pairs(v any) (iter.Seq2[any, any], error) {
	rv, keys, err := rangeable(v, true)
	if err != nil {
		return nil, err
	}
	return func(yield func(any, any) bool) {
		if keys != nil {
			for _, k := range keys {
				if !b.take() || !yield(k.Interface(), rv.MapIndex(k).Interface()) {
					return
				}
			}
			return
		}
		for i := range rv.Len() {
			if !b.take() || !yield(i, rv.Index(i).Interface()) {
				return
			}
		}
	}, nil
}

// rangeable is v as range sees it, with a map's keys sorted; nil ranges
// over nothing.
func rangeable(v any, pairs bool) (reflect.Value, []reflect.Value, error) {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Interface || rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return reflect.ValueOf([]any(nil)), nil, nil
		}
		rv = rv.Elem()
	}
	switch rv.Kind() {
	case reflect.Invalid:
		return reflect.ValueOf([]any(nil)), nil, nil
	case reflect.Slice, reflect.Array:
		return rv, nil, nil
	case reflect.Map:
		keys := rv.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keyLess(keys[i], keys[j]) })
		return rv, keys, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if !pairs {
			return rv, nil, nil
		}
	}
	return rv, nil, fmt.Errorf("range can't iterate over %v", v)
}

// keyLess orders map keys as range does: numbers by value, strings by
// text, anything else by its printed form.
func keyLess(a, b reflect.Value) bool {
	switch {
	case a.Kind() == reflect.String && b.Kind() == reflect.String:
		return a.String() < b.String()
	case a.CanInt() && b.CanInt():
		return a.Int() < b.Int()
	case a.CanUint() && b.CanUint():
		return a.Uint() < b.Uint()
	}
	return fmt.Sprint(a.Interface()) < fmt.Sprint(b.Interface())
}

// boundedOutput is a template's output, refused past templateOutput bytes
// (the write fails, which stops the execution).
type boundedOutput struct {
	buf      []byte
	exceeded bool
}

func (o *boundedOutput) Write(p []byte) (int, error) {
	if len(o.buf)+len(p) > templateOutput {
		o.exceeded = true
		return 0, errTemplateOutput
	}
	o.buf = append(o.buf, p...)
	return len(p), nil
}

package pipeline

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolgate/toolgate/internal/lifecycle"
)

// Action is a pre-execute decision.
type Action string

// Pre-execute actions. Abstain lets the next listener decide.
const (
	Abstain Action = ""
	Allow   Action = "allow"
	Deny    Action = "deny"
	Ask     Action = "ask"
)

// Decision is a pre-execute listener's answer. Reason is a stable name (a
// rule's name); Message is shown to the model and to approvers.
type Decision struct {
	Action  Action
	Reason  string
	Message string
	// Quorum says who may answer an Ask and how many must (nil: one
	// approval from anyone the approver accepts).
	Quorum *Quorum
}

// Quorum is who may answer an approval question and how many distinct
// people must approve; any one of them denying decides.
type Quorum struct {
	Required int      `json:"required"`
	Users    []string `json:"users,omitempty"`
	Groups   []string `json:"groups,omitempty"`
}

// PreListener decides a call before execution. It sees the frozen identity
// and cannot change it.
type PreListener func(ctx context.Context, call Call) Decision

// Guard is a monotonic owner rule: it returns a denial reason, or deny=false
// to abstain. Nothing after a guard can override its denial.
type Guard func(call Call) (reason string, deny bool)

// Next continues dispatch; a wrapper may pass a substitute context and
// nothing else.
type Next func(ctx context.Context) (any, error)

// Wrapper surrounds one attempt's dispatch (metrics, tracing, rate limits).
// It may substitute only the dispatch context; the caller's cancellation is
// re-fused before the body, and the timeout is enforced inside next. It must
// call next exactly once and return what next returned: the body's outcome
// is the result, and a wrapper that returns anything else (another value, a
// success after a failure, another error) fails the call (wrapper_failed).
type Wrapper func(ctx context.Context, call Call, next Next) (any, error)

// PostInput is what a post-execute listener sees of a successful result.
type PostInput struct {
	// Value is the canonical value as JSON text.
	Value string
	// Content is the rendered content.
	Content string
}

// PostDecision is a post-execute listener's answer. The zero value accepts
// without change.
type PostDecision struct {
	// Block turns the result into a valueless failure carrying only
	// Contexts; Message explains it.
	Block bool
	// ReplaceContent replaces the content (presentation only).
	ReplaceContent *string
	// ReplaceValue replaces the value (any JSON-able value or
	// json.RawMessage); it is validated and rendered again.
	ReplaceValue any
	// Contexts are attached to the result.
	Contexts []string
	Message  string
	// Err reports that the listener could not decide; the result fails as
	// post_failed.
	Err error
}

// PostListener inspects a successful result and may accept or block it.
type PostListener func(call Call, in PostInput) PostDecision

// Observer receives the frozen outcome (live tools/result).
type Observer func(res ResultView)

type entry[T any] struct {
	name  string
	order int
	seq   uint64
	fn    T
}

type tool struct {
	def    Definition
	params *jsonschema.Schema
	output *jsonschema.Schema
}

// Registry holds tool definitions and listeners, each registered under a
// lifecycle scope; disposing the scope removes them.
type Registry struct {
	mu        sync.RWMutex
	seq       uint64
	tools     map[string]*tool
	pre       []entry[PreListener]
	guards    []entry[Guard]
	wrappers  []entry[Wrapper]
	post      []entry[PostListener]
	observers []entry[Observer]
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{tools: map[string]*tool{}}
}

// Register adds a definition under scope. Schemas are compiled now, so a
// definition that would fail every call is refused at registration.
func (r *Registry) Register(scope *lifecycle.Scope, def Definition) error {
	if def.Name == "" || def.Execute == nil {
		return fmt.Errorf("tool %q: a name and an Execute body are required", def.Name)
	}
	if def.Output.Schema == "" {
		return fmt.Errorf("tool %q: the output declaration is mandatory", def.Name)
	}
	params, err := CompileSchema(def.Parameters)
	if err != nil {
		return fmt.Errorf("tool %q parameters: %w", def.Name, err)
	}
	output, err := CompileSchema(def.Output.Schema)
	if err != nil {
		return fmt.Errorf("tool %q output schema: %w", def.Name, err)
	}
	t := &tool{def: def, params: params, output: output}

	r.mu.Lock()
	if _, dup := r.tools[def.Name]; dup {
		r.mu.Unlock()
		return fmt.Errorf("tool %q is already registered", def.Name)
	}
	r.tools[def.Name] = t
	r.mu.Unlock()

	return r.owned(scope, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.tools[def.Name] == t {
			delete(r.tools, def.Name)
		}
	})
}

// owned ties a registration to scope, undoing it at once when the scope is
// already disposed.
func (r *Registry) owned(scope *lifecycle.Scope, undo func()) error {
	if err := scope.OnDispose(undo); err != nil {
		undo()
		return err
	}
	return nil
}

// OnPreExecute adds a pre-execute listener. Listeners run by ascending order,
// then registration order; reordering is changing order.
func (r *Registry) OnPreExecute(scope *lifecycle.Scope, name string, order int, fn PreListener) error {
	return addEntry(r, scope, &r.pre, name, order, fn)
}

// AddGuard adds a monotonic guard; guards run in registration order.
func (r *Registry) AddGuard(scope *lifecycle.Scope, name string, fn Guard) error {
	return addEntry(r, scope, &r.guards, name, 0, fn)
}

// WrapExecute adds an execute wrapper; the first registered is outermost.
func (r *Registry) WrapExecute(scope *lifecycle.Scope, name string, fn Wrapper) error {
	return addEntry(r, scope, &r.wrappers, name, 0, fn)
}

// OnPostExecute adds a post-execute listener, ordered like pre-execute ones.
func (r *Registry) OnPostExecute(scope *lifecycle.Scope, name string, order int, fn PostListener) error {
	return addEntry(r, scope, &r.post, name, order, fn)
}

// Observe adds an observer of settled results.
func (r *Registry) Observe(scope *lifecycle.Scope, name string, fn Observer) error {
	return addEntry(r, scope, &r.observers, name, 0, fn)
}

func addEntry[T any](r *Registry, scope *lifecycle.Scope, list *[]entry[T], name string, order int, fn T) error {
	r.mu.Lock()
	r.seq++
	e := entry[T]{name: name, order: order, seq: r.seq, fn: fn}
	// Copy on write: a snapshot taken by a running call is never mutated.
	next := append(slices.Clone(*list), e)
	slices.SortStableFunc(next, func(a, b entry[T]) int {
		// Compared, never subtracted: a difference of extreme keys overflows.
		if c := cmp.Compare(a.order, b.order); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	*list = next
	r.mu.Unlock()
	return r.owned(scope, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		*list = slices.DeleteFunc(slices.Clone(*list), func(x entry[T]) bool { return x.seq == e.seq })
	})
}

// snapshot is a consistent view of the registry for one step.
type snapshot struct {
	tool      *tool
	pre       []entry[PreListener]
	guards    []entry[Guard]
	wrappers  []entry[Wrapper]
	post      []entry[PostListener]
	observers []entry[Observer]
}

func (r *Registry) snapshot(name string) snapshot {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return snapshot{
		tool: r.tools[name], pre: r.pre, guards: r.guards, wrappers: r.wrappers,
		post: r.post, observers: r.observers,
	}
}

// Lookup returns the definition registered under name.
func (r *Registry) Lookup(name string) (Definition, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.tools[name]
	if !ok {
		return Definition{}, false
	}
	return t.def, true
}

// Counts reports how many tools and listeners are registered (for tests
// proving disposal).
func (r *Registry) Counts() (tools, listeners int) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.tools), len(r.pre) + len(r.guards) + len(r.wrappers) + len(r.post) + len(r.observers)
}

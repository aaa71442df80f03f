package profile

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/google/cel-go/cel"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/lifecycle"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/approval"
	"github.com/toolgate/toolgate/internal/textutil"
)

// Error is a compile error: a reason (one of the Ready condition reasons)
// and a message naming the tool or rule.
type Error struct {
	Reason  string
	Message string
}

func (e *Error) Error() string { return e.Reason + ": " + e.Message }

func fail(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Compiled is an immutable compiled profile.
type Compiled struct {
	// Generation is the ToolProfile generation compiled.
	Generation int64
	// Registry holds the tools and listeners.
	Registry *pipeline.Registry
	// Default is the decision for calls no rule matches (the preset).
	Default pipeline.Decision
	// Tools are the resolved tools, for status.
	Tools []toolgatev1alpha1.ResolvedTool
	// Spec is the compiled spec (defaults applied by the API server).
	Spec toolgatev1alpha1.ToolProfileSpec
	// Unavailable are the tools left out because their declaration is
	// their MCP server's and cannot be completed (DeclaredTools): why,
	// for the Ready condition and for their calls.
	Unavailable []toolgatev1alpha1.ToolProblem
	// Warnings name what compiled but may not do what was meant: an
	// expression reading a field no schema declares, where the schema
	// allows other fields.
	Warnings []string

	scope   *lifecycle.Scope
	schemas schemas
}

// Dispose releases the registry's registrations.
func (c *Compiled) Dispose() { c.scope.Dispose() }

// Compile compiles a profile. Its tools' bodies run through the driver's
// Runner (pipeline.Exec.Run), so compiling needs no sandbox.
func Compile(p *toolgatev1alpha1.ToolProfile) (*Compiled, error) {
	env, err := celEnv()
	if err != nil {
		return nil, err
	}
	c := &Compiled{
		Generation: p.Generation,
		Registry:   pipeline.NewRegistry(),
		Spec:       *p.Spec.DeepCopy(),
		scope:      lifecycle.NewScope(),
	}
	// An MCP server's tool may leave its description and schemas to its
	// server: they are taken from the listing in status it pins. A tool
	// whose listing is not there (yet, or any more) is left out, alone:
	// its calls fail at once (Unavailable), the others run.
	tools, problems := p.DeclaredTools()
	c.Spec.Tools = slices.DeleteFunc(tools, func(t toolgatev1alpha1.ToolDefinition) bool {
		return slices.ContainsFunc(problems, func(pr toolgatev1alpha1.ToolProblem) bool { return pr.Tool == t.Name })
	})
	c.Unavailable = problems
	c.schemas = schemasOf(&c.Spec)
	if err := c.compile(env); err != nil {
		c.Dispose()
		return nil, err
	}
	return c, nil
}

func (c *Compiled) compile(env *cel.Env) error {
	spec := &c.Spec
	for i := range spec.Tools {
		if err := c.compileTool(env, &spec.Tools[i]); err != nil {
			return err
		}
	}
	if err := reachable("approval.approvers", spec.Approval.Approvers); err != nil {
		return err
	}
	for i, r := range spec.PreExecute {
		if err := reachable("preExecute rule "+r.Name+": approvers", r.Approvers); err != nil {
			return err
		}
		if err := c.compilePre(env, i, r); err != nil {
			return err
		}
	}
	for _, g := range spec.Guards {
		if err := c.compileGuard(env, g); err != nil {
			return err
		}
	}
	for i, r := range spec.PostExecute {
		if err := c.compilePost(env, i, r); err != nil {
			return err
		}
	}
	switch spec.PermissionPreset {
	case toolgatev1alpha1.PresetTrusted:
		c.Default = pipeline.Decision{Action: pipeline.Allow, Reason: "preset-trusted"}
	case toolgatev1alpha1.PresetSupervised:
		c.Default = pipeline.Decision{Action: pipeline.Ask, Reason: "preset-supervised", Message: "no rule covers this call; a person must approve it",
			Quorum: approval.QuorumOf(spec.Approval.Approvers)}
	default:
		c.Default = pipeline.Decision{Action: pipeline.Deny, Reason: "preset-restricted", Message: "no rule allows this call"}
	}
	return nil
}

func (c *Compiled) compileTool(env *cel.Env, t *toolgatev1alpha1.ToolDefinition) error {
	if m := t.MCP; m != nil && !slices.ContainsFunc(c.Spec.MCPServers, func(s toolgatev1alpha1.MCPServer) bool { return s.Name == m.Server }) {
		return fail(toolgatev1alpha1.ToolProfileReasonSchemaInvalid, "tool %s: mcp.server %q names none of the profile's mcpServers", t.Name, m.Server)
	}
	if t.Egress != nil {
		for _, h := range t.Egress.Hosts {
			// An IPv6 host is matched as written: only its canonical form
			// is one the proxy compares with (the API server's CEL has no
			// IP functions before Kubernetes 1.31).
			if strings.Contains(h.Host, ":") {
				if a, err := netip.ParseAddr(h.Host); err != nil || a.String() != h.Host {
					return fail(toolgatev1alpha1.ToolProfileReasonSchemaInvalid,
						"tool %s: egress host %q: an IPv6 host is a canonical address: lowercase, zeros compressed, no brackets (2001:db8::1)", t.Name, h.Host)
				}
			}
		}
	}
	params, output := string(t.Parameters.Raw), string(t.Output.Schema.Raw)
	if doc, err := pipeline.ParseJSON(params); err != nil {
		return fail(toolgatev1alpha1.ToolProfileReasonSchemaInvalid, "tool %s: parameters: %v", t.Name, err)
	} else if m, ok := doc.(map[string]any); !ok || (m["type"] != nil && m["type"] != "object") {
		return fail(toolgatev1alpha1.ToolProfileReasonSchemaInvalid, "tool %s: parameters must describe an object", t.Name)
	}
	if _, err := pipeline.CompileSchema(params); err != nil {
		return fail(toolgatev1alpha1.ToolProfileReasonSchemaInvalid, "tool %s: parameters: %v", t.Name, oneLine(err))
	}
	if _, err := pipeline.CompileSchema(output); err != nil {
		return fail(toolgatev1alpha1.ToolProfileReasonSchemaInvalid, "tool %s: output schema: %v", t.Name, oneLine(err))
	}
	render, err := renderer(t)
	if err != nil {
		return fail(toolgatev1alpha1.ToolProfileReasonTemplateInvalid, "tool %s: render template: %v", t.Name, oneLine(err))
	}
	finalize, err := finalizer(t)
	if err != nil {
		return fail(toolgatev1alpha1.ToolProfileReasonTemplateInvalid, "tool %s: finalizeContent template: %v", t.Name, oneLine(err))
	}
	def := pipeline.Definition{
		Name:            t.Name,
		Description:     t.Description,
		Parameters:      params,
		Output:          pipeline.Output{Schema: output, Render: render},
		FinalizeContent: finalize,
		Timeout:         time.Duration(t.TimeoutSeconds) * time.Second,
		Idempotent:      t.Idempotent,
		Reattach:        true, // sandbox providers re-attach to an attempt, or report it lost
		TimesItself:     true, // the runner counts the timeout from the body's start
		MaxAttempts:     1,
		RetryBackoff:    0,
	}
	if t.Retry != nil {
		def.MaxAttempts = int(t.Retry.MaxAttempts)
		def.RetryBackoff = time.Duration(t.Retry.BackoffSeconds) * time.Second
	}
	stringOutput := schemaType(output) == "string"
	tool := t.DeepCopy()
	if t.MCP != nil {
		// The body is the tool's MCP server: its container (RunnableTools).
		for _, r := range c.Spec.RunnableTools() {
			if r.Name == t.Name {
				tool = r.DeepCopy()
			}
		}
	}
	def.Execute = func(ctx context.Context, _ pipeline.Arguments, exec *pipeline.Exec) (any, error) {
		// The body runs in the call's sandbox: the controller gives each
		// call's pipeline a Runner bound to it.
		out, err := exec.Run(ctx, tool)
		if err != nil {
			return nil, err
		}
		if stringOutput {
			return out, nil
		}
		if exec.Truncated {
			return nil, pipeline.Fail(pipeline.CodeToolError, "the output exceeded maxOutputBytes and was cut, so it is not a complete JSON value")
		}
		return json.RawMessage(out), nil
	}
	if t.IsConcurrencySafe != "" {
		prg, err := c.expr(env, "tool "+t.Name+": isConcurrencySafe", t.IsConcurrencySafe, nil, []string{t.Name}, "args")
		if err != nil {
			return fail(toolgatev1alpha1.ToolProfileReasonExpressionInvalid, "tool %s: isConcurrencySafe: %v", t.Name, oneLine(err))
		}
		def.IsConcurrencySafe = func(a pipeline.Arguments) any {
			out, err := prg.eval(map[string]any{"args": a.Copy(celNumber)})
			if err != nil {
				return err
			}
			return out.Value()
		}
	}
	if err := c.Registry.Register(c.scope, def); err != nil {
		return fail(toolgatev1alpha1.ToolProfileReasonSchemaInvalid, "tool %s: %v", t.Name, oneLine(err))
	}
	runtime := "container"
	switch {
	case t.Builtin != nil:
		runtime = "builtin:" + t.Builtin.Name
	case t.MCP != nil:
		runtime = "mcp:" + t.MCP.Server + "/" + t.MCP.ToolName(t.Name)
	}
	c.Tools = append(c.Tools, toolgatev1alpha1.ResolvedTool{
		Name: t.Name, Runtime: runtime, ConcurrencyClassified: t.IsConcurrencySafe != "", Idempotent: t.Idempotent,
	})
	return nil
}

// renderer turns the render declaration into a pipeline renderer (nil for
// JSON and Text, which the pipeline renders itself).
func renderer(t *toolgatev1alpha1.ToolDefinition) (func(pipeline.Arguments, any) (string, error), error) {
	switch t.Output.Render.Format {
	case toolgatev1alpha1.RenderTemplate:
		tpl, err := parseTemplate(t.Name, t.Output.Render.Template)
		if err != nil {
			return nil, err
		}
		return func(a pipeline.Arguments, v any) (string, error) {
			return execTemplate(tpl, a, v)
		}, nil
	case toolgatev1alpha1.RenderJSON:
		return func(_ pipeline.Arguments, v any) (string, error) { return pipeline.CanonicalJSON(v) }, nil
	default: // Text: a string as is, anything else as JSON
		return nil, nil
	}
}

// finalizer compiles a tool's finalizeContent: the template, then the byte
// cap. A template that fails to execute panics, which the pipeline settles
// as normalization_failed (a finalizer must be total).
func finalizer(t *toolgatev1alpha1.ToolDefinition) (func(string, pipeline.ResultView) string, error) {
	spec := t.Output.FinalizeContent
	if spec == nil {
		return nil, nil
	}
	var tpl *template.Template
	if spec.Template != "" {
		var err error
		if tpl, err = parseTemplate(t.Name+"-finalize", spec.Template); err != nil {
			return nil, err
		}
	}
	limit := int(spec.MaxBytes)
	return func(content string, res pipeline.ResultView) string {
		if tpl != nil {
			data := map[string]any{"Content": content, "Outcome": string(res.Outcome()), "Code": string(res.Code()), "Message": res.Message()}
			out, err := runTemplate(tpl, data)
			if err != nil {
				panic(err)
			}
			content = out
		}
		if limit > 0 {
			content = textutil.TruncateMarked(content, limit, "…[truncated]")
		}
		return content
	}, nil
}

func execTemplate(tpl *template.Template, a pipeline.Arguments, v any) (string, error) {
	return runTemplate(tpl, map[string]any{"Args": a.Value(), "Value": v})
}

// appliesTo reports whether a rule's tool list covers tool.
// expr compiles the expression at where, which runs for tools (all when
// empty) with vars bound, and checks what it reads (fields.go); a warning
// is kept, prefixed with where.
func (c *Compiled) expr(env *cel.Env, where, expr string, want *cel.Type, tools []string, vars ...string) (*program, error) {
	prg, err := compileExpr(env, expr, want)
	if err != nil {
		return nil, err
	}
	warnings, err := c.schemas.checkReads(prg.ast, tools, vars...)
	if err != nil {
		return nil, err
	}
	for _, w := range warnings {
		c.Warnings = append(c.Warnings, where+": "+w)
	}
	return prg, nil
}

func appliesTo(tools []string, tool string) bool {
	if len(tools) == 0 {
		return true
	}
	for _, t := range tools {
		if t == tool {
			return true
		}
	}
	return false
}

func (c *Compiled) compilePre(env *cel.Env, i int, r toolgatev1alpha1.PolicyRule) error {
	var when *program
	if r.When != "" {
		var err error
		if when, err = c.expr(env, "preExecute rule "+r.Name+": when", r.When, cel.BoolType, r.Tools, "call"); err != nil {
			return fail(toolgatev1alpha1.ToolProfileReasonExpressionInvalid, "preExecute rule %s: when: %v", r.Name, oneLine(err))
		}
	}
	action := map[toolgatev1alpha1.PolicyAction]pipeline.Action{
		toolgatev1alpha1.ActionAllow: pipeline.Allow, toolgatev1alpha1.ActionDeny: pipeline.Deny, toolgatev1alpha1.ActionAsk: pipeline.Ask,
	}[r.Action]
	var quorum *pipeline.Quorum
	if action == pipeline.Ask {
		quorum = approval.QuorumOf(r.Approvers)
		if quorum == nil {
			quorum = approval.QuorumOf(c.Spec.Approval.Approvers)
		}
	}
	return c.Registry.OnPreExecute(c.scope, r.Name, i, func(_ context.Context, call pipeline.Call) pipeline.Decision {
		if !appliesTo(r.Tools, call.Tool) {
			return pipeline.Decision{}
		}
		if when != nil {
			ok, err := when.evalBool(callVars(call))
			if err != nil {
				// A rule that cannot be evaluated denies: fail closed.
				return pipeline.Decision{Action: pipeline.Deny, Reason: r.Name, Message: "the rule could not be evaluated" + evalReason(err)}
			}
			if !ok {
				return pipeline.Decision{}
			}
		}
		return pipeline.Decision{Action: action, Reason: r.Name, Message: r.Message, Quorum: quorum}
	})
}

// reachable refuses approvers whose count no one could ever reach: more
// approvals required than users named, with no group to add more.
func reachable(where string, a *toolgatev1alpha1.Approvers) error {
	if a == nil || len(a.Groups) > 0 || len(a.Users) == 0 || int(a.Required) <= len(a.Users) {
		return nil
	}
	return fail(toolgatev1alpha1.ToolProfileReasonSchemaInvalid,
		"%s: %d approvals required but only %d users named and no group: no call it asks about could ever be approved", where, a.Required, len(a.Users))
}

func (c *Compiled) compileGuard(env *cel.Env, g toolgatev1alpha1.GuardRule) error {
	deny, err := c.expr(env, "guard "+g.Name+": deny", g.Deny, cel.BoolType, g.Tools, "call")
	if err != nil {
		return fail(toolgatev1alpha1.ToolProfileReasonExpressionInvalid, "guard %s: deny: %v", g.Name, oneLine(err))
	}
	return c.Registry.AddGuard(c.scope, g.Name, func(call pipeline.Call) (string, bool) {
		if !appliesTo(g.Tools, call.Tool) {
			return "", false
		}
		denied, err := deny.evalBool(callVars(call))
		if err != nil {
			return g.Message + " (the guard could not be evaluated" + evalReason(err) + ")", true
		}
		return g.Message, denied
	})
}

func (c *Compiled) compilePost(env *cel.Env, i int, r toolgatev1alpha1.PostRule) error {
	var when, replaceValue *program
	var replaceContent *template.Template
	var err error
	if r.When != "" {
		if when, err = c.expr(env, "postExecute rule "+r.Name+": when", r.When, cel.BoolType, r.Tools, "call", "result"); err != nil {
			return fail(toolgatev1alpha1.ToolProfileReasonExpressionInvalid, "postExecute rule %s: when: %v", r.Name, oneLine(err))
		}
	}
	if r.ReplaceValue != "" {
		if replaceValue, err = c.expr(env, "postExecute rule "+r.Name+": replaceValue", r.ReplaceValue, nil, r.Tools, "call", "result"); err != nil {
			return fail(toolgatev1alpha1.ToolProfileReasonExpressionInvalid, "postExecute rule %s: replaceValue: %v", r.Name, oneLine(err))
		}
	}
	if r.ReplaceContent != "" {
		if replaceContent, err = parseTemplate(r.Name, r.ReplaceContent); err != nil {
			return fail(toolgatev1alpha1.ToolProfileReasonTemplateInvalid, "postExecute rule %s: replaceContent: %v", r.Name, oneLine(err))
		}
	}
	redact, err := compileRedact(r.Redact)
	if err != nil {
		return fail(toolgatev1alpha1.ToolProfileReasonExpressionInvalid, "postExecute rule %s: redact: %v", r.Name, oneLine(err))
	}
	return c.Registry.OnPostExecute(c.scope, r.Name, i, func(call pipeline.Call, in pipeline.PostInput) pipeline.PostDecision {
		if !appliesTo(r.Tools, call.Tool) {
			return pipeline.PostDecision{}
		}
		result := pipeline.ArgumentsOf(in.Value) // the value, frozen like arguments
		vars := callVars(call)
		vars["result"] = map[string]any{"value": result.Copy(celNumber), "content": in.Content}
		if when != nil {
			ok, err := when.evalBool(vars)
			if err != nil {
				return pipeline.PostDecision{Err: err}
			}
			if !ok {
				return pipeline.PostDecision{}
			}
		}
		d := pipeline.PostDecision{Block: r.Action == toolgatev1alpha1.PostBlock, Contexts: r.Contexts, Message: r.Message}
		if replaceContent != nil {
			s, err := execTemplate(replaceContent, call.Args, result.Value())
			if err != nil {
				return pipeline.PostDecision{Err: err}
			}
			d.ReplaceContent = &s
		}
		if replaceValue != nil {
			v, err := replaceValue.evalJSON(vars)
			if err != nil {
				return pipeline.PostDecision{Err: err}
			}
			d.ReplaceValue = v
		}
		if redact != nil {
			if v, changed := redact.value(result.Value()); changed {
				d.ReplaceValue = v
			}
		}
		return d
	})
}

// evalReason says why a rule on a call's arguments could not be evaluated,
// when CEL says it in words that name a field or an operator, never a
// value ("" otherwise): the message goes to the caller, who sent the
// arguments.
func evalReason(err error) string {
	msg := err.Error()
	if key, ok := strings.CutPrefix(msg, "no such key: "); ok {
		return ": the arguments have no field " + strconv.Quote(textutil.OneLine(key, 64))
	}
	if strings.HasPrefix(msg, "inexact number") {
		return ": " + strings.TrimPrefix(msg, "inexact number: ")
	}
	if strings.HasPrefix(msg, "no such overload") {
		// CEL names at most the operator or function, never the values.
		return ": an argument's type does not fit the expression (" + textutil.OneLine(msg, 100) + ")"
	}
	return ""
}

func schemaType(schema string) string {
	doc, err := pipeline.ParseJSON(schema)
	if err != nil {
		return ""
	}
	m, _ := doc.(map[string]any)
	t, _ := m["type"].(string)
	return t
}

func oneLine(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

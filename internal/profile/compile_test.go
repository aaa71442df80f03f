package profile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"sigs.k8s.io/yaml"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// runnerFunc adapts a function to pipeline.Runner.
type runnerFunc func(args pipeline.Arguments) (string, error)

func (f runnerFunc) Run(_ context.Context, spec any, args pipeline.Arguments, _ *pipeline.Exec) (string, error) {
	if _, ok := spec.(*toolgatev1alpha1.ToolDefinition); !ok {
		return "", fmt.Errorf("spec is %T, not the tool's definition", spec)
	}
	return f(args)
}

// echoRunner returns the "text" argument, as a container tool printing it
// would.
var echoRunner = runnerFunc(func(a pipeline.Arguments) (string, error) {
	s, _ := a.Field("text")
	return s, nil
})

func TestCompileSampleProfile(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "samples", "toolgate_v1alpha1_toolprofile.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p := &toolgatev1alpha1.ToolProfile{}
	if err := yaml.UnmarshalStrict(data, p); err != nil {
		t.Fatal(err)
	}
	c, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Dispose()
	if len(c.Tools) != 4 || c.Default.Action != pipeline.Deny {
		t.Fatalf("tools %d default %s", len(c.Tools), c.Default.Action)
	}
	tools, listeners := c.Registry.Counts()
	if tools != 4 || listeners != 5 { // 2 pre rules, 1 guard, 2 post rules
		t.Fatalf("registry has %d tools, %d listeners", tools, listeners)
	}
	c.Dispose()
	if tools, listeners := c.Registry.Counts(); tools != 0 || listeners != 0 {
		t.Fatalf("after Dispose: %d tools, %d listeners", tools, listeners)
	}
}

func TestCompileErrorsNameTheToolOrRule(t *testing.T) {
	for name, tc := range map[string]struct {
		edit   func(*tu.ToolProfileWrapper)
		reason string
		names  string
	}{
		"parameters not an object": {func(w *tu.ToolProfileWrapper) {
			w.Spec.Tools[0].Parameters = tu.JSON(`{"type":"string"}`)
		}, toolgatev1alpha1.ToolProfileReasonSchemaInvalid, "tool echo: parameters"},
		"invalid output schema": {func(w *tu.ToolProfileWrapper) {
			w.Spec.Tools[0].Output.Schema = tu.JSON(`{"type":"strang"}`)
		}, toolgatev1alpha1.ToolProfileReasonSchemaInvalid, "tool echo: output schema"},
		"remote $ref": {func(w *tu.ToolProfileWrapper) {
			w.Spec.Tools[0].Parameters = tu.JSON(`{"type":"object","properties":{"x":{"$ref":"https://example.com/x.json"}}}`)
		}, toolgatev1alpha1.ToolProfileReasonSchemaInvalid, "tool echo: parameters"},
		"classifier syntax": {func(w *tu.ToolProfileWrapper) {
			w.Spec.Tools[0].IsConcurrencySafe = "args.text =="
		}, toolgatev1alpha1.ToolProfileReasonExpressionInvalid, "tool echo: isConcurrencySafe"},
		"rule when not bool": {func(w *tu.ToolProfileWrapper) {
			w.PreRule("reads", toolgatev1alpha1.ActionAllow, "'yes'")
		}, toolgatev1alpha1.ToolProfileReasonExpressionInvalid, "preExecute rule reads: when"},
		"guard unknown variable": {func(w *tu.ToolProfileWrapper) {
			w.Guard("no-secrets", "secret.path == 'x'", "no")
		}, toolgatev1alpha1.ToolProfileReasonExpressionInvalid, "guard no-secrets: deny"},
		"post template": {func(w *tu.ToolProfileWrapper) {
			w.PostRule(toolgatev1alpha1.PostRule{Name: "redact", Action: toolgatev1alpha1.PostAccept, ReplaceContent: "{{.Value"})
		}, toolgatev1alpha1.ToolProfileReasonTemplateInvalid, "postExecute rule redact: replaceContent"},
		"a quorum nobody can reach": {func(w *tu.ToolProfileWrapper) {
			w.PreRule("writes", toolgatev1alpha1.ActionAsk, "")
			w.Spec.PreExecute[0].Approvers = &toolgatev1alpha1.Approvers{Required: 3, Users: []string{"alice", "bob"}}
		}, toolgatev1alpha1.ToolProfileReasonSchemaInvalid, "preExecute rule writes: approvers: 3 approvals required but only 2 users named"},
		"a default quorum nobody can reach": {func(w *tu.ToolProfileWrapper) {
			w.Spec.Approval.Approvers = &toolgatev1alpha1.Approvers{Required: 2, Users: []string{"alice"}}
		}, toolgatev1alpha1.ToolProfileReasonSchemaInvalid, "approval.approvers: 2 approvals required"},
		"an IPv6 host not in canonical form": {func(w *tu.ToolProfileWrapper) {
			w.Spec.Tools[0].Egress = &toolgatev1alpha1.ToolEgress{Hosts: []toolgatev1alpha1.EgressHost{{Host: "2001:DB8:0::1"}}}
		}, toolgatev1alpha1.ToolProfileReasonSchemaInvalid, `tool echo: egress host "2001:DB8:0::1"`},
		"render template": {func(w *tu.ToolProfileWrapper) {
			w.Spec.Tools[0].Output.Render = toolgatev1alpha1.RenderSpec{Format: toolgatev1alpha1.RenderTemplate, Template: "{{range}}"}
		}, toolgatev1alpha1.ToolProfileReasonTemplateInvalid, "tool echo: render template"},
	} {
		t.Run(name, func(t *testing.T) {
			w := tu.MakeToolProfile("ns", "p")
			tc.edit(w)
			_, err := Compile(w.Obj())
			var cerr *Error
			if err == nil || !asError(err, &cerr) {
				t.Fatalf("compiled, or a non-compile error: %v", err)
			}
			if cerr.Reason != tc.reason || !strings.HasPrefix(cerr.Message, tc.names) {
				t.Fatalf("got %s %q, want %s %q...", cerr.Reason, cerr.Message, tc.reason, tc.names)
			}
		})
	}
}

func asError(err error, target **Error) bool {
	e, ok := err.(*Error)
	*target = e
	return ok
}

// run compiles w and runs one call of tool with args through a pipeline
// using the profile's default decision.
func run(t *testing.T, w *tu.ToolProfileWrapper, tool, args string) pipeline.Result {
	t.Helper()
	c, err := Compile(w.Obj())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Dispose()
	p := pipeline.New(c.Registry, pipeline.Options{Default: c.Default, Runner: echoRunner})
	return p.Run(context.Background(), pipeline.Request{CallID: "c", Tool: tool, Arguments: args, Requester: "agent", Session: "s"})
}

func TestCompiledRulesDecide(t *testing.T) {
	profile := func() *tu.ToolProfileWrapper {
		return tu.MakeToolProfile("ns", "p").
			PreRule("deny-shouting", toolgatev1alpha1.ActionDeny, "call.args.text.upperAscii() == call.args.text").
			PreRule("allow-echo", toolgatev1alpha1.ActionAllow, "", "echo").
			Guard("no-passwords", "call.args.text.contains('password')", "passwords stay home", "echo")
	}
	for _, tc := range []struct {
		args string
		code pipeline.Code
	}{
		{`{"text":"hello"}`, ""},
		{`{"text":"HELLO"}`, pipeline.CodePolicyDenied},
		{`{"text":"my password"}`, pipeline.CodeGuardDenied},
	} {
		if res := run(t, profile(), "echo", tc.args); res.Code != tc.code {
			t.Errorf("%s: code %q (%s), want %q", tc.args, res.Code, res.Message, tc.code)
		}
	}
	// No rule matches another tool: the Restricted preset denies it.
	w := profile().Tools(tu.MakeTool("echo").Obj(), tu.MakeTool("other").Obj())
	if res := run(t, w, "other", `{"text":"hi"}`); res.Code != pipeline.CodePolicyDenied || !strings.Contains(res.Message, "no rule allows") {
		t.Errorf("other: %s %q", res.Code, res.Message)
	}
	if res := run(t, w.Preset(toolgatev1alpha1.PresetTrusted), "other", `{"text":"hi"}`); res.Outcome != pipeline.Succeeded {
		t.Errorf("trusted preset: %s", res.Code)
	}
}

func TestCompiledPostRules(t *testing.T) {
	base := func() *tu.ToolProfileWrapper {
		return tu.MakeToolProfile("ns", "p").Preset(toolgatev1alpha1.PresetTrusted)
	}
	block := base().PostRule(toolgatev1alpha1.PostRule{
		Name: "no-keys", Action: toolgatev1alpha1.PostBlock, When: "result.content.contains('PRIVATE KEY')",
		Message: "holds a key", Contexts: []string{"withheld"},
	})
	if res := run(t, block, "echo", `{"text":"-----BEGIN PRIVATE KEY-----"}`); res.Code != pipeline.CodePostBlocked || res.Value != "" || len(res.Contexts) != 1 {
		t.Errorf("block: %+v", res)
	}
	if res := run(t, block, "echo", `{"text":"fine"}`); res.Outcome != pipeline.Succeeded {
		t.Errorf("no block: %+v", res)
	}
	value := base().PostRule(toolgatev1alpha1.PostRule{Name: "upper", Action: toolgatev1alpha1.PostAccept, ReplaceValue: "result.value.upperAscii()"})
	if res := run(t, value, "echo", `{"text":"abc"}`); res.Value != `"ABC"` || res.Content != "ABC" {
		t.Errorf("replaceValue: %+v", res)
	}
	content := base().PostRule(toolgatev1alpha1.PostRule{Name: "wrap", Action: toolgatev1alpha1.PostAccept, ReplaceContent: "[{{.Value}} for {{.Args.text}}]"})
	if res := run(t, content, "echo", `{"text":"abc"}`); res.Value != `"abc"` || res.Content != "[abc for abc]" {
		t.Errorf("replaceContent: %+v", res)
	}
	broken := base().PostRule(toolgatev1alpha1.PostRule{Name: "broken", Action: toolgatev1alpha1.PostAccept, When: "result.value.size() > int(call.args.text)"}) // "abc" is no int
	if res := run(t, broken, "echo", `{"text":"abc"}`); res.Code != pipeline.CodePostFailed {
		t.Errorf("a rule that cannot be evaluated: %+v", res)
	}
}

func TestCompiledClassifierIsExact(t *testing.T) {
	for expr, want := range map[string]pipeline.Mode{
		"true":                     pipeline.Parallel,
		"args.text == 'read'":      pipeline.Exclusive, // false for "x"
		"'true'":                   pipeline.Exclusive,
		"1 == 1 ? 1 : 0":           pipeline.Exclusive,
		"int(args.text) == 1":      pipeline.Exclusive, // evaluation error: "x" is no int
		"args.text.startsWith('')": pipeline.Parallel,
	} {
		w := tu.MakeToolProfile("ns", "p")
		w.Spec.Tools[0].IsConcurrencySafe = expr
		c, err := Compile(w.Obj())
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		p := pipeline.New(c.Registry, pipeline.Options{})
		if got := p.Classify(pipeline.Request{Tool: "echo", Arguments: `{"text":"x"}`}); got != want {
			t.Errorf("%s: %s, want %s", expr, got, want)
		}
		c.Dispose()
	}
}

func TestTemplateRenderAndLargeIntegers(t *testing.T) {
	w := tu.MakeToolProfile("ns", "p").Preset(toolgatev1alpha1.PresetTrusted).Tools(
		tu.MakeTool("count").Parameters(`{"type":"object","properties":{"text":{"type":"string"},"n":{"type":"integer"}}}`).Obj())
	w.Spec.Tools[0].Output = toolgatev1alpha1.OutputDeclaration{
		Schema: tu.JSON(`{"type":"object","properties":{"n":{"type":"integer"}}}`),
		Render: toolgatev1alpha1.RenderSpec{Format: toolgatev1alpha1.RenderTemplate, Template: "n={{.Value.n}}"},
	}
	c, err := Compile(w.Obj())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Dispose()
	large := runnerFunc(func(pipeline.Arguments) (string, error) { return `{"n": 123456789012345678901234567890}`, nil })
	res := pipeline.New(c.Registry, pipeline.Options{Default: c.Default, Runner: large}).Run(context.Background(),
		pipeline.Request{CallID: "c", Tool: "count", Arguments: `{"n": 1}`})
	if res.Value != `{"n":123456789012345678901234567890}` || res.Content != "n=123456789012345678901234567890" {
		t.Fatalf("%+v", res)
	}
}

// TestCostLimitFailsClosed: an expression too expensive to evaluate stops
// at the cost limit; a guard then denies.
func TestCostLimitFailsClosed(t *testing.T) {
	w := tu.MakeToolProfile("ns", "p").Preset(toolgatev1alpha1.PresetTrusted).
		Guard("quadratic", "call.args.items.all(a, call.args.items.all(b, a == b || a != b)) && false", "too costly")
	w.Spec.Tools[0].Parameters = tu.JSON(`{"type":"object"}`)
	items := strings.Repeat(`1,`, 2000) + "1"
	res := run(t, w, "echo", `{"text":"x","items":[`+items+`]}`)
	if res.Code != pipeline.CodeGuardDenied || !strings.Contains(res.Message, "could not be evaluated") {
		t.Fatalf("%s %q", res.Code, res.Message)
	}
	if res := run(t, w, "echo", `{"text":"x","items":[1,2]}`); res.Outcome != pipeline.Succeeded {
		t.Fatalf("a cheap evaluation: %s %q", res.Code, res.Message)
	}
}

// TestFinalizeContent: a declared tool's finalizeContent has the last,
// content-only word on every result, failures included.
func TestFinalizeContent(t *testing.T) {
	profile := func(spec toolgatev1alpha1.FinalizeContentSpec) *tu.ToolProfileWrapper {
		w := tu.MakeToolProfile("ns", "p").Preset(toolgatev1alpha1.PresetTrusted).Guard("no-shouting", "call.args.text == 'STOP'", "no shouting")
		w.Spec.Tools[0].Output.FinalizeContent = &spec
		return w
	}
	tagged := profile(toolgatev1alpha1.FinalizeContentSpec{Template: "[{{.Outcome}} {{.Code}}] {{.Content}}"})
	if res := run(t, tagged, "echo", `{"text":"hello"}`); res.Outcome != pipeline.Succeeded || res.Content != "[Succeeded ] hello" || res.Value != `"hello"` {
		t.Errorf("success: %s %q %q", res.Outcome, res.Content, res.Value)
	}
	if res := run(t, tagged, "echo", `{"text":"STOP"}`); res.Code != pipeline.CodeGuardDenied || res.Content != "[Denied guard_denied] error: guard_denied: no shouting" {
		t.Errorf("failure: %s %q", res.Code, res.Content)
	}
	capped := profile(toolgatev1alpha1.FinalizeContentSpec{MaxBytes: 32})
	res := run(t, capped, "echo", `{"text":"`+strings.Repeat("é", 40)+`"}`)
	if len(res.Content) > 32 || !strings.HasSuffix(res.Content, "…[truncated]") || !utf8.ValidString(res.Content) || res.Outcome != pipeline.Succeeded {
		t.Errorf("cap: %d bytes %q", len(res.Content), res.Content)
	}
	broken := profile(toolgatev1alpha1.FinalizeContentSpec{Template: "{{.Missing}}"})
	if res := run(t, broken, "echo", `{"text":"hello"}`); res.Code != pipeline.CodeNormalizationFailed || res.Value != "" {
		t.Errorf("a template that fails to execute: %s %q", res.Code, res.Value)
	}
	if _, err := Compile(profile(toolgatev1alpha1.FinalizeContentSpec{Template: "{{.Content"}).Obj()); err == nil || !strings.Contains(err.Error(), "finalizeContent template") {
		t.Errorf("a template that does not parse: %v", err)
	}
}

// TestReplaceValueKeepsNumbersExact: a value that goes through a CEL
// replaceValue keeps its numbers exact: an integer CEL holds exactly comes
// back the same text (9007199254740993 once came back a string), and one it
// cannot (a 30-digit integer, once committed as 1.2345678901234568e+29)
// fails the rule with a message that says so, never a changed number.
func TestReplaceValueKeepsNumbersExact(t *testing.T) {
	w := tu.MakeToolProfile("ns", "p").Preset(toolgatev1alpha1.PresetTrusted).Tools(
		tu.MakeTool("count").Parameters(`{"type":"object"}`).Obj()).
		PostRule(toolgatev1alpha1.PostRule{Name: "same", Action: toolgatev1alpha1.PostAccept, ReplaceValue: "result.value"})
	w.Spec.Tools[0].Output = toolgatev1alpha1.OutputDeclaration{Schema: tu.JSON(`{"type":"object"}`)}
	c, err := Compile(w.Obj())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Dispose()
	for _, tt := range []struct {
		out, value string
		code       pipeline.Code
	}{
		{out: `{"n": 9007199254740993, "m": -9223372036854775808, "f": 0.1, "s": "x", "l": [1, true, null]}`, value: `{"f":0.1,"l":[1,true,null],"m":-9223372036854775808,"n":9007199254740993,"s":"x"}`},
		{out: `{"n": 123456789012345678901234567890}`, code: pipeline.CodePostFailed},
	} {
		out := tt.out
		runner := runnerFunc(func(pipeline.Arguments) (string, error) { return out, nil })
		res := pipeline.New(c.Registry, pipeline.Options{Default: c.Default, Runner: runner}).Run(context.Background(),
			pipeline.Request{CallID: "c", Tool: "count", Arguments: `{}`})
		if res.Code != tt.code || res.Value != tt.value {
			t.Errorf("%s: %s %s %q, value %s; want %q, value %s", tt.out, res.Outcome, res.Code, res.Message, res.Value, tt.code, tt.value)
		}
		if tt.code != "" && !strings.Contains(res.Message, "exactly") {
			t.Errorf("%s: the failure does not say why: %q", tt.out, res.Message)
		}
	}
}

// TestTemplatesRunOnABudget: a profile author's template runs inside the
// manager on every call, so it runs on a budget like CEL: a range that
// would loop millions of times (with output or without, nested over the
// model's arguments) and output past the bound fail the render
// (render_failed) at once; a template that defines or calls templates is
// refused when the profile compiles. Ranges keep their meaning.
func TestTemplatesRunOnABudget(t *testing.T) {
	render := func(tpl, args string) (pipeline.Result, error) {
		t.Helper()
		w := tu.MakeToolProfile("ns", "p").Preset(toolgatev1alpha1.PresetTrusted).Tools(
			tu.MakeTool("t").Parameters(`{"type":"object"}`).Obj())
		w.Spec.Tools[0].Output = toolgatev1alpha1.OutputDeclaration{
			Schema: tu.JSON(`{"type":"object"}`),
			Render: toolgatev1alpha1.RenderSpec{Format: toolgatev1alpha1.RenderTemplate, Template: tpl},
		}
		c, err := Compile(w.Obj())
		if err != nil {
			return pipeline.Result{}, err
		}
		defer c.Dispose()
		value := runnerFunc(func(pipeline.Arguments) (string, error) {
			return `{"l":[3,1,2],"m":{"b":2,"a":1,"10":0},"none":[]}`, nil
		})
		return pipeline.New(c.Registry, pipeline.Options{Default: c.Default, Runner: value}).Run(context.Background(),
			pipeline.Request{CallID: "c", Tool: "t", Arguments: args}), nil
	}
	list := "[" + strings.Repeat("0,", 999) + "0]"
	for _, bomb := range []struct{ name, tpl, args string }{
		{"twenty million iterations with output", `{{range 20000000}}x{{end}}`, `{}`},
		{"two hundred thousand without output", `{{range 200000}}{{end}}`, `{}`},
		{"nested over the arguments", `{{range .Args.l}}{{range $.Args.l}}{{end}}{{end}}`, `{"l":` + list + `}`},
		{"output past the bound", `{{range 5000}}{{printf "%0900d" 1}}{{end}}`, `{}`},
	} {
		start := time.Now()
		res, err := render(bomb.tpl, bomb.args)
		if err != nil {
			t.Fatalf("%s: %v", bomb.name, err)
		}
		if res.Code != pipeline.CodeRenderFailed || !strings.Contains(res.Message, "the template") {
			t.Errorf("%s: %s %q after %s, want render_failed on the budget", bomb.name, res.Code, res.Message, time.Since(start))
		}
	}
	for _, recursive := range []string{`{{define "a"}}{{template "a" .}}{{end}}x`, `{{template "x"}}`, `{{block "b" .}}{{end}}`} {
		if _, err := render(recursive, `{}`); err == nil || !strings.Contains(err.Error(), "template") {
			t.Errorf("%s: compiled (%v)", recursive, err)
		}
	}
	for tpl, want := range map[string]string{
		`{{range .Value.l}}{{.}}{{end}}`:                                        "312",
		`{{range $i, $e := .Value.l}}{{$i}}:{{$e}} {{end}}`:                     "0:3 1:1 2:2 ",
		`{{range .Value.m}}{{.}}{{end}}`:                                        "012",
		`{{range $k, $v := .Value.m}}{{$k}}={{$v}} {{end}}`:                     "10=0 a=1 b=2 ",
		`{{range 3}}{{.}}{{end}}`:                                               "012",
		`{{range .Value.none}}x{{else}}empty{{end}}`:                            "empty",
		`{{range .Value.l}}{{if eq (print .) "1"}}{{break}}{{end}}{{.}}{{end}}`: "3",
		`{{with .Value.l}}{{range .}}{{.}}{{end}}{{end}}`:                       "312",
	} {
		res, err := render(tpl, `{}`)
		if err != nil || res.Content != want {
			t.Errorf("%s: %q %s %q (%v), want %q", tpl, res.Content, res.Code, res.Message, err, want)
		}
	}
}

// TestRedactByPattern: the sample profile's redact rule removes its token
// patterns from every string of a value, at any depth, and the content is
// rendered again from the redacted value; a CEL replaceValue may use
// regex.replace; a pattern that is no RE2 expression fails the compile.
func TestRedactByPattern(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "samples", "toolgate_v1alpha1_toolprofile.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sample := &toolgatev1alpha1.ToolProfile{}
	if err := yaml.UnmarshalStrict(data, sample); err != nil {
		t.Fatal(err)
	}
	var redact toolgatev1alpha1.PostRule
	for _, r := range sample.Spec.PostExecute {
		if len(r.Redact) > 0 {
			redact = r
		}
	}
	if redact.Name == "" {
		t.Fatal("the sample has no redact rule")
	}
	ghp, sk, akia := "ghp_"+strings.Repeat("a1B2", 9), "sk-proj-"+strings.Repeat("x9", 12), "AKIA"+strings.Repeat("Z7", 8)
	out := fmt.Sprintf(`{"log":"token %s and %s","nested":[{"k":"%s"},"clean"],"n":1}`, ghp, sk, akia)
	w := tu.MakeToolProfile("ns", "p").Preset(toolgatev1alpha1.PresetTrusted).Tools(tu.MakeTool("t").Parameters(`{"type":"object"}`).Obj())
	w.Spec.Tools[0].Output = toolgatev1alpha1.OutputDeclaration{Schema: tu.JSON(`{"type":"object"}`), Render: toolgatev1alpha1.RenderSpec{Format: toolgatev1alpha1.RenderJSON}}
	w.Spec.PostExecute = []toolgatev1alpha1.PostRule{redact}
	res := runWith(t, w, out)
	for _, secret := range []string{ghp, sk, akia} {
		if strings.Contains(res.Value+res.Content, secret) {
			t.Fatalf("%s reached the model: value %s content %s", secret, res.Value, res.Content)
		}
	}
	if want := `{"log":"token [redacted] and [redacted]","n":1,"nested":[{"k":"[aws key redacted]"},"clean"]}`; res.Value != want || res.Content != want {
		t.Fatalf("value %s content %s, want %s", res.Value, res.Content, want)
	}

	w.Spec.PostExecute = []toolgatev1alpha1.PostRule{{Name: "cel", Action: toolgatev1alpha1.PostAccept,
		ReplaceValue: `{"log": regex.replace(result.value.log, 'gh[pousr]_[A-Za-z0-9]{36,}', '***')}`}}
	if res := runWith(t, w, out); strings.Contains(res.Value, ghp) || !strings.Contains(res.Value, "token *** and") {
		t.Fatalf("regex.replace: %s %s %q", res.Code, res.Value, res.Message)
	}

	w.Spec.PostExecute = []toolgatev1alpha1.PostRule{{Name: "bad", Action: toolgatev1alpha1.PostAccept, Redact: []toolgatev1alpha1.RedactPattern{{Pattern: "(?<=x)y"}}}}
	if _, err := Compile(w.Obj()); err == nil || !strings.Contains(err.Error(), "postExecute rule bad: redact") {
		t.Fatalf("an invalid pattern compiled: %v", err)
	}
}

// runWith runs one call of the profile's first tool, whose body outputs out.
func runWith(t *testing.T, w *tu.ToolProfileWrapper, out string) pipeline.Result {
	t.Helper()
	c, err := Compile(w.Obj())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Dispose()
	body := runnerFunc(func(pipeline.Arguments) (string, error) { return out, nil })
	return pipeline.New(c.Registry, pipeline.Options{Default: c.Default, Runner: body}).Run(context.Background(),
		pipeline.Request{CallID: "c", Tool: w.Spec.Tools[0].Name, Arguments: `{}`})
}

// TestExpressionsReadFieldsThatExist checks every expression kind is
// refused, naming itself and the field, when it reads a field its
// variables or the schemas of the tools it runs for cannot have (a typo
// would otherwise deny or fail every call at run time), and compiles with a
// warning when a schema allows undeclared fields.
func TestExpressionsReadFieldsThatExist(t *testing.T) {
	closed := `{"type":"object","additionalProperties":false,"properties":{"path":{"type":"string"},"opts":{"type":"object","additionalProperties":false,"properties":{"mode":{"type":"string"}}}}}`
	open := `{"type":"object","properties":{"path":{"type":"string"}}}`
	output := `{"type":"object","additionalProperties":false,"properties":{"lines":{"type":"integer"}}}`
	profile := func(set func(*tu.ToolProfileWrapper)) *toolgatev1alpha1.ToolProfile {
		w := tu.MakeToolProfile("ns", "p").Preset(toolgatev1alpha1.PresetTrusted).Tools(
			tu.MakeTool("write").Parameters(closed).Obj(), tu.MakeTool("read").Parameters(open).Obj())
		w.Spec.Tools[0].Output.Schema = tu.JSON(output)
		set(w)
		return w.Obj()
	}
	pre := func(when string, tools ...string) func(*tu.ToolProfileWrapper) {
		return func(w *tu.ToolProfileWrapper) { w.PreRule("r", toolgatev1alpha1.ActionDeny, when, tools...) }
	}
	guard := func(deny string, tools ...string) func(*tu.ToolProfileWrapper) {
		return func(w *tu.ToolProfileWrapper) {
			w.Spec.Guards = append(w.Spec.Guards, toolgatev1alpha1.GuardRule{Name: "g", Deny: deny, Message: "no", Tools: tools})
		}
	}
	post := func(when string, tools ...string) func(*tu.ToolProfileWrapper) {
		return func(w *tu.ToolProfileWrapper) {
			w.PostRule(toolgatev1alpha1.PostRule{Name: "p", Action: toolgatev1alpha1.PostAccept, When: when, Tools: tools})
		}
	}
	classify := func(expr string) func(*tu.ToolProfileWrapper) {
		return func(w *tu.ToolProfileWrapper) { w.Spec.Tools[0].IsConcurrencySafe = expr }
	}
	for _, c := range []struct {
		name       string
		set        func(*tu.ToolProfileWrapper)
		err, warns string
	}{
		{"a typo in a closed schema", pre("call.args.pth == 'x'", "write"), `preExecute rule r: when: reads call.args.pth, a field the parameters of tool write do not have`, ""},
		{"indexed with a constant", pre(`call.args["pth"] == 'x'`, "write"), `reads call.args.pth`, ""},
		{"tested with has()", pre("has(call.args.pth)", "write"), `reads call.args.pth`, ""},
		{"a nested typo", pre("call.args.opts.mod == 'x'", "write"), `reads call.args.opts.mod`, ""},
		{"a field of a string", pre("call.args.path.len == 1", "write"), `reads call.args.path.len`, ""},
		{"declared", pre("call.args.opts.mode == 'x' && call.args.path != ''", "write"), "", ""},
		{"an open schema", pre("call.args.pth == 'x'", "read"), "", `preExecute rule r: when: reads call.args.pth, a field the parameters of tool read do not declare`},
		{"all tools, declared by one", pre("has(call.args.path)"), "", ""},
		{"all tools, one open", pre("has(call.args.pth)"), "", `tools write, read do not declare`},
		{"a field call lacks", pre("call.tool_name == 'x'"), `reads call.tool_name, but call has only the fields tool, args, requester, session, turn, index`, ""},
		{"args in a rule", pre("args.path == 'x'"), `reads args.path, but only call is bound here`, ""},
		{"a guard", guard("call.args.pth.startsWith('/')", "write"), `guard g: deny: reads call.args.pth`, ""},
		{"a post rule on the output", post("result.value.line > 3", "write"), `postExecute rule p: when: reads result.value.line, a field the output schema of tool write do not have`, ""},
		{"result.isError", post("result.isError"), `reads result.isError, but result has only the fields value, content`, ""},
		{"a post rule on the output, declared", post("result.value.lines > 3", "write"), "", ""},
		{"a classifier", classify("args.pth == 'x'"), `tool write: isConcurrencySafe: reads args.pth`, ""},
		{"call in a classifier", classify("call.args.path == 'x'"), `reads call.args.path, but only args is bound here`, ""},
		{"a comprehension's own variable", pre("['a'].all(x, x.size() > 0 && call.args.path != x)", "write"), "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			compiled, err := Compile(profile(c.set))
			if c.err != "" {
				var cerr *Error
				if !errors.As(err, &cerr) || cerr.Reason != toolgatev1alpha1.ToolProfileReasonExpressionInvalid || !strings.Contains(cerr.Message, c.err) {
					t.Fatalf("error %v, want ExpressionInvalid containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer compiled.Dispose()
			got := strings.Join(compiled.Warnings, "\n")
			if (c.warns == "") != (got == "") || !strings.Contains(got, c.warns) {
				t.Fatalf("warnings %q, want %q", got, c.warns)
			}
		})
	}
}

// TestAFailedEvaluationSaysWhy checks a guard and a rule that cannot be
// evaluated (a field an open schema allows but the call lacks) deny naming
// the field.
func TestAFailedEvaluationSaysWhy(t *testing.T) {
	guard := tu.MakeToolProfile("ns", "p").Preset(toolgatev1alpha1.PresetTrusted).Guard("g", "call.args.pth.startsWith('/')", "no absolute paths")
	guard.Spec.Tools[0].Parameters = tu.JSON(`{"type":"object"}`)
	if res := run(t, guard, "echo", `{"text":"x"}`); res.Code != pipeline.CodeGuardDenied || res.Message != `no absolute paths (the guard could not be evaluated: the arguments have no field "pth")` {
		t.Errorf("guard: %s %q", res.Code, res.Message)
	}
	types := tu.MakeToolProfile("ns", "p").Preset(toolgatev1alpha1.PresetTrusted).Guard("g", "call.args.text > 3", "short texts only")
	if res := run(t, types, "echo", `{"text":"secret-value"}`); res.Code != pipeline.CodeGuardDenied || !strings.Contains(res.Message, "an argument's type does not fit the expression (no such overload") || strings.Contains(res.Message, "secret-value") {
		t.Errorf("types: %s %q", res.Code, res.Message)
	}
	rule := tu.MakeToolProfile("ns", "p").Preset(toolgatev1alpha1.PresetTrusted).PreRule("r", toolgatev1alpha1.ActionAllow, "call.args.pth == 'x'")
	rule.Spec.Tools[0].Parameters = tu.JSON(`{"type":"object"}`)
	if res := run(t, rule, "echo", `{"text":"x"}`); res.Code != pipeline.CodePolicyDenied || res.Message != `the rule could not be evaluated: the arguments have no field "pth"` {
		t.Errorf("rule: %s %q", res.Code, res.Message)
	}
}

// TestRulesNeverReadARoundedNumber: a rule that reads a number no double
// holds exactly (more digits, beyond int64 and a double's precision,
// beyond its range) fails closed, saying so without the value, instead of
// deciding on the rounded value while the body reads the exact one; a
// number a double holds (0.1, 99.5, 1e2) reads as ever, and a rule that
// does not read the number is not affected.
func TestRulesNeverReadARoundedNumber(t *testing.T) {
	profile := tu.MakeToolProfile("ns", "p").Preset(toolgatev1alpha1.PresetTrusted).
		Guard("at-most-100", "call.args.amount > 100.0", "amounts above 100 need another tool")
	profile.Spec.Tools[0].Parameters = tu.JSON(`{"type":"object"}`)
	for _, tc := range []struct {
		amount string
		code   pipeline.Code
	}{
		{"99.5", ""},
		{"0.1", ""},
		{"1e2", ""},
		{"100.000000000000001", pipeline.CodeGuardDenied}, // a double holds 100: the guard would pass it
		{"18446744073709551617", pipeline.CodeGuardDenied},
		{"101", pipeline.CodeGuardDenied},
	} {
		res := run(t, profile, "echo", `{"amount":`+tc.amount+`}`)
		if res.Code != tc.code {
			t.Errorf("%s: %q (%s), want %q", tc.amount, res.Code, res.Message, tc.code)
		}
		if tc.code != "" && tc.amount != "101" && (!strings.Contains(res.Message, "a rule cannot read this number exactly") || strings.Contains(res.Message, tc.amount)) {
			t.Errorf("%s: the reason %q", tc.amount, res.Message)
		}
	}
	other := tu.MakeToolProfile("ns", "p").Preset(toolgatev1alpha1.PresetTrusted).Guard("no-secrets", "call.args.text == 'secret'", "no")
	other.Spec.Tools[0].Parameters = tu.JSON(`{"type":"object"}`)
	if res := run(t, other, "echo", `{"text":"hi","amount":100.000000000000001}`); res.Code != "" {
		t.Errorf("a rule that does not read the number: %s %q", res.Code, res.Message)
	}
}

// FuzzRulesReadNumbersExactly: whatever number an argument holds, a rule
// reads it as the body does (an int64 of the same value, or a double whose
// shortest decimal is the number) or not at all (an error).
func FuzzRulesReadNumbersExactly(f *testing.F) {
	for _, s := range []string{"0", "-0", "1", "0.1", "1e2", "9007199254740993", "9223372036854775807", "9223372036854775808",
		"100.000000000000001", "1e308", "1e309", "5e-324", "2e-324", "-12.5e-3", "123456789012345678901234567890"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		v, err := pipeline.ParseJSON(text)
		if err != nil {
			return
		}
		n, ok := v.(json.Number)
		if !ok {
			return
		}
		want, ok := new(big.Rat).SetString(string(n))
		if !ok {
			t.Fatalf("the parser kept %q, which is no number", n)
		}
		var got *big.Rat
		switch x := celNumber(n).(type) {
		case int64:
			got = new(big.Rat).SetInt64(x)
		case float64:
			got, _ = new(big.Rat).SetString(strconv.FormatFloat(x, 'g', -1, 64))
		case ref.Val:
			if !types.IsError(x) {
				t.Fatalf("%q read as %v", n, x)
			}
			return // a rule that reads it fails closed
		default:
			t.Fatalf("%q read as %T", n, x)
		}
		if got == nil || got.Cmp(want) != 0 {
			t.Fatalf("%q: a rule reads %v, the body %v", n, got, want)
		}
	})
}

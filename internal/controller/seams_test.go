package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/lifecycle"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/providers/approval"
	approvalnone "github.com/toolgate/toolgate/internal/providers/approval/none"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/providers/sandbox/process"
)

// TestSandboxSeam mounts the process provider, invokes it through the
// consumer (the call's pipeline.Runner), disposes the scope and
// proves the registration is gone.
func TestSandboxSeam(t *testing.T) {
	scope := lifecycle.NewScope()
	mounts := &sandbox.Mounts{}
	woke := make(chan types.NamespacedName, 1)
	if err := mounts.Mount(scope, "Process", process.New(t.TempDir(), func(o types.NamespacedName) { woke <- o })); err != nil {
		t.Fatal(err)
	}
	tool := &toolgatev1alpha1.ToolDefinition{Name: "echo", Container: &toolgatev1alpha1.ContainerRuntime{Command: []string{"/bin/cat"}}}
	invoke := func(resumed bool) (string, error) {
		provider, _ := mounts.Get("Process")
		run := callRunner{provider: provider, job: sandbox.Job{
			Owner: types.NamespacedName{Namespace: "ns", Name: "c"}, OwnerUID: "uid-1",
			Session: sandbox.Session{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "s"}},
		}}
		return run.Run(context.Background(), tool, pipeline.ArgumentsOf(`{"x":1}`), &pipeline.Exec{Attempt: 1, Resumed: resumed})
	}
	if _, err := invoke(false); !errors.Is(err, pipeline.Pending) {
		t.Fatalf("first invocation: %v, want Pending", err)
	}
	select {
	case o := <-woke:
		if o.Name != "c" {
			t.Fatalf("woke %v", o)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the provider never notified")
	}
	if out, err := invoke(true); err != nil || out != `{"x":1}` {
		t.Fatalf("through the consumer: %q %v", out, err)
	}

	scope.Dispose()
	if _, ok := mounts.Get("Process"); ok || mounts.Len() != 0 {
		t.Fatal("the provider is still mounted after its scope was disposed")
	}
	var f *pipeline.Failure
	if _, err := invoke(true); !errors.As(err, &f) || f.Code != pipeline.CodeSandboxUnavailable {
		t.Fatalf("the consumer after disposal: %v, want sandbox_unavailable", err)
	}
}

// TestApprovalSeam mounts the none provider, asks through a pipeline (the
// consumer), disposes the scope, and proves the registration is gone and
// asking still fails closed.
func TestApprovalSeam(t *testing.T) {
	scope := lifecycle.NewScope()
	mounts := &approval.Mounts{}
	if err := mounts.Mount(scope, "None", approvalnone.Provider{}); err != nil {
		t.Fatal(err)
	}
	ask := func() pipeline.Result {
		reg := pipeline.NewRegistry()
		s := lifecycle.NewScope()
		defer s.Dispose()
		_ = reg.Register(s, pipeline.Definition{
			Name: "t", Parameters: `{"type":"object"}`, Output: pipeline.Output{Schema: `{}`},
			Execute: func(context.Context, pipeline.Arguments, *pipeline.Exec) (any, error) { return "ran", nil },
		})
		opts := pipeline.Options{Default: pipeline.Decision{Action: pipeline.Ask}}
		if a, ok := mounts.Get("None"); ok {
			opts.Approver = approval.For(a, approval.Subject{})
		}
		return pipeline.New(reg, opts).Run(context.Background(), pipeline.Request{CallID: "c", Tool: "t", Arguments: `{}`})
	}
	if res := ask(); res.Code != pipeline.CodeApprovalUnavailable || res.Message != "approval is disabled for this profile (provider None)" {
		t.Fatalf("through the mounted provider: %s %q", res.Code, res.Message)
	}
	scope.Dispose()
	if _, ok := mounts.Get("None"); ok {
		t.Fatal("the provider is still mounted after its scope was disposed")
	}
	if res := ask(); res.Code != pipeline.CodeApprovalUnavailable || res.Message != "no approver is available; asking fails closed" {
		t.Fatalf("without a provider: %s %q", res.Code, res.Message)
	}
}

package pod

import (
	"testing"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// TestTemplateIsTheKindOfPod: pods of two calls that differ only in what
// the call hands over (tool, argv, timeout, arguments) are interchangeable
// (one template); another image, or another workspace, is another kind.
func TestTemplateIsTheKindOfPod(t *testing.T) {
	build := func(edit func(j *toolgatev1alpha1.ToolDefinition), claim string) string {
		job := testJob(toolgatev1alpha1.SandboxWorkspaceWrite, claim)
		tool := *job.Tool
		tool.Container = tool.Container.DeepCopy()
		edit(&tool)
		job.Tool = &tool
		pod, err := BuildPod(testConfig, job, "p")
		if err != nil {
			t.Fatal(err)
		}
		return templateOf(pod)
	}
	base := build(func(*toolgatev1alpha1.ToolDefinition) {}, "ws")
	same := build(func(d *toolgatev1alpha1.ToolDefinition) {
		d.Name, d.TimeoutSeconds, d.Container.Command = "other", 999, []string{"/bin/true"}
	}, "ws")
	if same != base {
		t.Fatalf("another tool of the same image is another kind of pod: %s vs %s", same, base)
	}
	if build(func(d *toolgatev1alpha1.ToolDefinition) { d.Container.Image = "other:1" }, "ws") == base {
		t.Fatal("another image is the same kind of pod")
	}
	if build(func(*toolgatev1alpha1.ToolDefinition) {}, "other-claim") == base {
		t.Fatal("another workspace is the same kind of pod")
	}
}

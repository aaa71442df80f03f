package controller

import (
	"os"
	"path/filepath"
	"regexp"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testenv"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// docs/tools.md's example tool, as written: its profile is read from the
// page, applied as YAML (the API server defaults what it omits), and each
// row of the page's table is a call checked here. Only the sandbox differs:
// the process provider runs the argv on this machine (its shell, sed, wc
// and tr) instead of in the tools image.
var _ = Describe("docs/tools.md's example tool", func() {
	It("counts words, fails with its exit code and stderr, and is never run on arguments its schema refuses", func() {
		p := docsProfile("tools.md", "profile")
		ns := p.Namespace
		Expect(k8s.Create(ctx, p)).To(Succeed())
		profileReady(p, "True", toolgatev1alpha1.ToolProfileReasonResolved)
		Expect(k8s.Create(ctx, tu.MakeAgentSession(ns, "s", p.Name).Obj())).To(Succeed())

		submit(ns, "counted", "word_count", `{"text":"one two three"}`, 0, 0, 1)
		c := committedCall(ns, "counted").Status.Result
		Expect(c.Outcome).To(Equal(toolgatev1alpha1.OutcomeSucceeded), c.Message)
		Expect(c.Value).To(MatchJSON(`{"words":3}`))
		Expect(c.Content).To(Equal("3 words"))
		Expect(c.Contexts).To(ConsistOf(And(HaveField("Source", toolgatev1alpha1.ContextSourceTool), HaveField("Message", "counted 3 words"))))

		submit(ns, "empty", "word_count", `{"text":""}`, 1, 0, 1)
		c = committedCall(ns, "empty").Status.Result
		Expect(c.ErrorCode).To(Equal("tool_error"))
		Expect(c.Message).To(And(ContainSubstring("3"), ContainSubstring("no words to count")))

		submit(ns, "quoted", "word_count", `{"text":"a \"quoted\" word"}`, 2, 0, 1)
		c = committedCall(ns, "quoted").Status.Result
		Expect(c.ErrorCode).To(Equal("invalid_arguments"))
		Expect(c.Message).To(ContainSubstring("at /text: fails pattern"))

		submit(ns, "misnamed", "word_count", `{"txt":"one"}`, 3, 0, 1)
		c = committedCall(ns, "misnamed").Status.Result
		Expect(c.ErrorCode).To(Equal("invalid_arguments"))
		Expect(c.Message).To(ContainSubstring(`at /: missing required field "text"`))
	})
})

// docsProfile is the ToolProfile of the YAML block after the page's
// "<!-- example: NAME -->" marker, read strictly (a field the API does not
// have fails), in a new namespace, on the process sandbox (the specs'
// sandbox; nothing else differs from the page).
func docsProfile(page, name string) *toolgatev1alpha1.ToolProfile {
	text, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", page))
	Expect(err).NotTo(HaveOccurred())
	block := regexp.MustCompile("(?s)<!-- example: " + regexp.QuoteMeta(name) + " -->\n```yaml\n(.*?)```\n").FindSubmatch(text)
	Expect(block).NotTo(BeNil(), "docs/%s has no example %s", page, name)
	p := &toolgatev1alpha1.ToolProfile{}
	Expect(yaml.UnmarshalStrict(block[1], p)).To(Succeed())
	p.Namespace = newNamespace()
	p.Spec.Sandbox.Provider = toolgatev1alpha1.SandboxProviderProcess
	return p
}

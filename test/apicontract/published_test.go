package apicontract

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/toolgate/toolgate/internal/testenv"
)

// readSamples decodes every object of config/samples.
func readSamples() []*unstructured.Unstructured {
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "samples", "toolgate_*.yaml"))
	Expect(err).NotTo(HaveOccurred())
	Expect(files).NotTo(BeEmpty())
	objs, err := testenv.ReadObjects(files...)
	Expect(err).NotTo(HaveOccurred())
	return objs
}

var _ = Describe("config/samples", func() {
	It("are all accepted, one of each kind", func() {
		ns := newNamespace()
		kinds := map[string]bool{}
		for _, u := range readSamples() {
			u.SetNamespace(ns)
			Expect(k8s.Create(ctx, u)).To(Succeed(), "sample %s/%s", u.GetKind(), u.GetName())
			kinds[u.GetKind()] = true
		}
		Expect(kinds).To(HaveKey("ToolProfile"))
		Expect(kinds).To(HaveKey("AgentSession"))
		Expect(kinds).To(HaveKey("ToolCall"))
		Expect(kinds).To(HaveKey("ApprovalRequest"))
	})
})

var _ = Describe("the published API", func() {
	// kubectl is envtest's kubectl (the source-built binary) logged in as an
	// administrator.
	var kubectl interface {
		Run(args ...string) (stdout, stderr io.Reader, err error)
	}

	BeforeEach(func() {
		user, err := env.Environment.AddUser(envtest.User{Name: "contract-admin", Groups: []string{"system:masters"}}, nil)
		Expect(err).NotTo(HaveOccurred())
		kubectl, err = user.Kubectl()
		Expect(err).NotTo(HaveOccurred())
	})

	try := func(args ...string) (string, error) {
		stdout, stderr, err := kubectl.Run(args...)
		out, _ := io.ReadAll(stdout)
		errText, _ := io.ReadAll(stderr)
		if err != nil {
			return "", fmt.Errorf("kubectl %s: %s: %w", strings.Join(args, " "), errText, err)
		}
		return string(out), nil
	}
	run := func(args ...string) string {
		out, err := try(args...)
		Expect(err).NotTo(HaveOccurred())
		return out
	}

	DescribeTable("explains spec fields with their documentation",
		func(field, text string) {
			// The API server publishes a new CRD's OpenAPI shortly after
			// the CRD is established.
			Eventually(func() (string, error) { return try("explain", field) }, 20*time.Second, 250*time.Millisecond).
				Should(ContainSubstring(text))
		},
		Entry(nil, "toolprofile.spec.tools", "visible tool catalog"),
		Entry(nil, "toolprofile.spec.tools.isConcurrencySafe", "Only the exact value true"),
		Entry(nil, "toolprofile.spec.guards", "monotonic owner rules"),
		Entry(nil, "toolprofile.spec.sandbox.mode", "WorkspaceWrite"),
		Entry(nil, "agentsession.spec.maxParallel", "bounds how many parallel-safe calls"),
		Entry(nil, "toolcall.spec.arguments", "byte for byte"),
		Entry(nil, "toolcall.spec.cancelRequested", "only go from"),
		Entry(nil, "approvalrequest.spec.decision", "set once by an approver"),
	)

	It("lists all four kinds under the toolgate category and their short names", func() {
		ns := newNamespace()
		for _, u := range readSamples() {
			u.SetNamespace(ns)
			Expect(k8s.Create(ctx, u)).To(Succeed())
		}
		out := run("get", "toolgate", "-n", ns, "-o", "name")
		for _, want := range []string{
			"toolprofile.toolgate.dev/workspace-tools",
			"agentsession.toolgate.dev/demo",
			"toolcall.toolgate.dev/demo-t0-0",
			"approvalrequest.toolgate.dev/demo-t0-1",
		} {
			Expect(out).To(ContainSubstring(want))
		}
		Expect(run("get", "tc", "-n", ns)).To(And(ContainSubstring("SESSION"), ContainSubstring("TOOL"), ContainSubstring("read_file")))
		Expect(run("get", "tp", "-n", ns)).To(ContainSubstring("workspace-tools"))
		Expect(run("get", "ags", "-n", ns)).To(ContainSubstring("workspace-tools"))
		Expect(run("get", "apr", "-n", ns)).To(ContainSubstring("Approve"))
	})
})

var _ = Describe("config/default", func() {
	It("renders with kustomize and installs on the API server", func() {
		user, err := env.Environment.AddUser(envtest.User{Name: "installer", Groups: []string{"system:masters"}}, nil)
		Expect(err).NotTo(HaveOccurred())
		kubectl, err := user.Kubectl()
		Expect(err).NotTo(HaveOccurred())
		stdout, stderr, err := kubectl.Run("kustomize", filepath.Join(testenv.RepoRoot(), "config", "default"))
		errText, _ := io.ReadAll(stderr)
		Expect(err).NotTo(HaveOccurred(), string(errText))
		rendered, err := io.ReadAll(stdout)
		Expect(err).NotTo(HaveOccurred())
		dir := GinkgoT().TempDir()
		file := filepath.Join(dir, "install.yaml")
		Expect(os.WriteFile(file, rendered, 0o600)).To(Succeed())
		objs, err := testenv.ReadObjects(file)
		Expect(err).NotTo(HaveOccurred())
		// The admission bindings, validating and mutating, would apply to
		// every spec that runs after this one, in an order Ginkgo shuffles;
		// the server validates them (dry run) without keeping them.
		var kept, bindings []byte
		for _, o := range objs {
			data, err := o.MarshalJSON()
			Expect(err).NotTo(HaveOccurred())
			if isAdmissionBinding(o.GetObjectKind().GroupVersionKind()) {
				bindings = append(bindings, append(data, '\n')...)
			} else {
				kept = append(kept, append(data, '\n')...)
			}
		}
		Expect(bindings).NotTo(BeEmpty())
		Expect(os.WriteFile(file, kept, 0o600)).To(Succeed())
		bindingsFile := filepath.Join(dir, "bindings.json")
		Expect(os.WriteFile(bindingsFile, bindings, 0o600)).To(Succeed())
		_, stderr, err = kubectl.Run("apply", "--server-side", "--force-conflicts", "-f", file)
		errText, _ = io.ReadAll(stderr)
		Expect(err).NotTo(HaveOccurred(), string(errText))
		_, stderr, err = kubectl.Run("apply", "--server-side", "--dry-run=server", "-f", bindingsFile)
		errText, _ = io.ReadAll(stderr)
		Expect(err).NotTo(HaveOccurred(), string(errText))
		_, stderr, err = kubectl.Run("get", "deployment/toolgate-controller-manager", "-n", "toolgate-system")
		errText, _ = io.ReadAll(stderr)
		Expect(err).NotTo(HaveOccurred(), string(errText))
		stdout, stderr, err = kubectl.Run("get", "validatingadmissionpolicybindings,mutatingadmissionpolicybindings", "-o", "name")
		errText, _ = io.ReadAll(stderr)
		Expect(err).NotTo(HaveOccurred(), string(errText))
		left, err := io.ReadAll(stdout)
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.TrimSpace(string(left))).To(BeEmpty(), "an admission binding was kept and applies to the specs after this one")
	})
})

// isAdmissionBinding reports whether an object binds an admission policy:
// once bound, a policy applies to every spec that runs after it.
func isAdmissionBinding(gvk schema.GroupVersionKind) bool {
	return gvk.Group == "admissionregistration.k8s.io" && strings.HasSuffix(gvk.Kind, "PolicyBinding")
}

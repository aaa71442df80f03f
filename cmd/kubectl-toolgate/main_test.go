package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/keys"
	"github.com/toolgate/toolgate/internal/testenv"
	tu "github.com/toolgate/toolgate/internal/testutil"
)

// pluginEnv makes the test binary act as the plugin: the test runs it
// through the real kubectl, as a user would.
const pluginEnv = "TOOLGATE_TEST_RUN_PLUGIN"

func TestMain(m *testing.M) {
	if os.Getenv(pluginEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// plugin runs commands through kubectl against one API server.
type plugin struct {
	t          *testing.T
	kubectl    string
	kubeconfig string
	path       string
}

// result is one run: stdout, stderr and the exit code.
type result struct {
	out, err string
	code     int
}

// run runs `kubectl args...` with the plugin on PATH.
func (p *plugin) run(args ...string) result {
	return p.exec(p.kubectl, args...)
}

func (p *plugin) exec(bin string, args ...string) result {
	p.t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), pluginEnv+"=1", "PATH="+p.path+":"+os.Getenv("PATH"), "KUBECONFIG="+p.kubeconfig)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	code := 0
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		p.t.Fatalf("running %s %v: %v", bin, args, err)
	}
	return result{out: out.String(), err: errb.String(), code: code}
}

// TestPlugin runs `kubectl toolgate` as a user runs it (a process started by
// kubectl, flags parsed by cli-runtime) against a real API server holding
// the shipped roles and admission policies of config/default, each user
// impersonated with --as and bound only to a shipped role.
func TestPlugin(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	c := env.Client
	p := newPlugin(t, env.Config)
	installShipped(t, c, p.kubectl)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "agents-"}}
	must(t, c.Create(ctx, ns))
	bind(t, c, ns.Name, "demo-agent", "toolgate-agent")
	bind(t, c, ns.Name, "agent-only", "toolgate-agent")
	bind(t, c, ns.Name, "demo-approver", "toolgate-approver")
	// The agent may approve too, so its own approval is refused by the
	// admission policy (the requester rule), not for want of RBAC.
	must(t, c.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "agent-approver"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "toolgate-approver"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "demo-agent"}},
	}))
	// lead-approver approves in every namespace (pending -A).
	must(t, c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "lead-approver"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "toolgate-approver"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "lead-approver"}},
	}))
	agent := []string{"toolgate", "-n", ns.Name, "--as", "demo-agent"}
	approver := []string{"toolgate", "-n", ns.Name, "--as", "demo-approver"}
	with := func(base []string, args ...string) []string { return append(append([]string{}, base...), args...) }

	// The agent opens a session on a profile and submits a call, as itself;
	// toolgate (here, the test as admin) asks about it.
	must(t, c.Create(ctx, tu.MakeToolProfile(ns.Name, "coding").Obj()))
	waitForPolicies(t, env, ns.Name)
	as := impersonated(t, env, "demo-agent")
	session := tu.MakeAgentSession(ns.Name, "s", "coding").Obj()
	session.Spec.Owner = "demo-agent"
	must(t, as.Create(ctx, session))
	for _, name := range []string{"write-notes", "read-notes"} {
		must(t, as.Create(ctx, tu.MakeToolCall(ns.Name, name, "s").Requester("demo-agent").Obj()))
	}
	hour := metav1.NewTime(time.Now().Add(time.Hour))
	for _, name := range []string{"write-notes", "read-notes"} {
		ar := tu.MakeApprovalRequest(ns.Name, name, name, hour).Session("s").Obj()
		ar.Spec.Requester = "demo-agent"
		ar.Spec.ArgumentsPreview = `{"path":"notes.md","content":"` + strings.Repeat("ü", 80) + `"}`
		must(t, c.Create(ctx, ar))
	}

	t.Run("the requester is refused by the API server", func(t *testing.T) {
		r := p.run(with(agent, "approve", "write-notes", "--question", "test-seal-write-notes")...)
		if r.code == 0 || !strings.Contains(r.err, "the requester of a call may not decide its approval") {
			t.Fatalf("exit %d, stderr %q", r.code, r.err)
		}
	})

	t.Run("an approver approves, once", func(t *testing.T) {
		r := p.run(with(approver, "approve", "write-notes", "--question", "test-seal-write-notes", "-m", "reviewed")...)
		if r.code != 0 || !strings.Contains(r.out, "approvalrequest/write-notes: Approve by demo-approver") {
			t.Fatalf("exit %d, out %q, err %q", r.code, r.out, r.err)
		}
		ar := &toolgatev1alpha1.ApprovalRequest{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "write-notes"}, ar))
		if d := ar.Spec.Decision; d == nil || d.DecidedBy != "demo-approver" || d.Message != "reviewed" {
			t.Fatalf("decision %+v", d)
		}
		r = p.run(with(approver, "deny", "write-notes")...)
		if r.code == 0 || !strings.Contains(r.err, "already decided: Approve by demo-approver") {
			t.Fatalf("second decision: exit %d, stderr %q", r.code, r.err)
		}
	})

	t.Run("an answer binds to the question its approver read: a call asked again under the same name is not decided by a command for its predecessor", func(t *testing.T) {
		ask := func(preview, seal string) *toolgatev1alpha1.ApprovalRequest {
			ar := tu.MakeApprovalRequest(ns.Name, "deploy", "deploy", hour).Session("s").Obj()
			ar.Spec.Requester, ar.Spec.ArgumentsPreview = "demo-agent", preview
			ar.Annotations[toolgatev1alpha1.AnnotationQuestionSeal] = seal
			must(t, c.Create(ctx, ar))
			return ar
		}
		must(t, as.Create(ctx, tu.MakeToolCall(ns.Name, "deploy", "s").Requester("demo-agent").Obj()))
		first := ask(`{"cmd":"ls -l /tmp"}`, "a1a1a1a1a1a1a1a1-first")
		// The approver reads the question; pending shows its ID, and a
		// notification's command carries it.
		r := p.run(with(approver, "pending")...)
		read := toolgatev1alpha1.ShortQuestionID(first.QuestionID())
		if r.code != 0 || !strings.Contains(r.out, "QUESTION") || !strings.Contains(r.out, read) {
			t.Fatalf("pending shows no question ID: exit %d, out %q, err %q", r.code, r.out, r.err)
		}
		// Meanwhile the agent deletes its call and submits it again with
		// other arguments: toolgate asks again, under the same name.
		must(t, c.Delete(ctx, first))
		second := ask(`{"cmd":"rm -rf /data"}`, "b2b2b2b2b2b2b2b2-second")

		r = p.run(with(approver, "approve", "deploy", "--question", read)...)
		if r.code == 0 || !strings.Contains(r.err, "asks question b2b2b2b2b2b2, not "+read) {
			t.Fatalf("the command for the first question approved the second: exit %d, out %q, err %q", r.code, r.out, r.err)
		}
		r = p.run(with(approver, "approve", "deploy")...)
		if r.code == 0 || !strings.Contains(r.err, "approving needs the question you read: add --question b2b2b2b2b2b2") {
			t.Fatalf("approve without the question, outside a terminal: exit %d, out %q, err %q", r.code, r.out, r.err)
		}
		r = p.run(with(approver, "approve", "deploy", "--question", "b2b2")...)
		if r.code == 0 || !strings.Contains(r.err, "too short") {
			t.Fatalf("a question ID too short to name one: exit %d, err %q", r.code, r.err)
		}

		// Around the plugin, the API server refuses an answer that names
		// the predecessor, or no question at all.
		approverClient := impersonated(t, env, "demo-approver")
		for name, d := range map[string]*toolgatev1alpha1.ApprovalDecision{
			"the predecessor": first.DecisionOf(toolgatev1alpha1.DecisionApprove, "demo-approver", ""),
			"no question":     {Action: toolgatev1alpha1.DecisionApprove, DecidedBy: "demo-approver"},
			"its UID alone":   {Action: toolgatev1alpha1.DecisionApprove, DecidedBy: "demo-approver", RequestUID: string(second.UID)},
			"its seal alone":  {Action: toolgatev1alpha1.DecisionApprove, DecidedBy: "demo-approver", Question: second.QuestionID()},
		} {
			got := &toolgatev1alpha1.ApprovalRequest{}
			must(t, approverClient.Get(ctx, client.ObjectKeyFromObject(second), got))
			got.Spec.Decision = d
			if err := approverClient.Update(ctx, got); err == nil || !strings.Contains(err.Error(), "a decision names the question its approver read") {
				t.Fatalf("a decision naming %s: %v", name, err)
			}
		}

		// Read again, the new question is answered by its own ID.
		r = p.run(with(approver, "approve", "deploy", "--question", toolgatev1alpha1.ShortQuestionID(second.QuestionID()))...)
		if r.code != 0 {
			t.Fatalf("approving the question read: exit %d, out %q, err %q", r.code, r.out, r.err)
		}
		got := &toolgatev1alpha1.ApprovalRequest{}
		must(t, c.Get(ctx, client.ObjectKeyFromObject(second), got))
		if d := got.Spec.Decision; d == nil || d.RequestUID != string(second.UID) || d.Question != second.QuestionID() {
			t.Fatalf("decision %+v does not name the question read", d)
		}
	})

	t.Run("pending -A -o json is a list of what waits", func(t *testing.T) {
		r := p.run("toolgate", "--as", "lead-approver", "pending", "-A", "-o", "json")
		if r.code != 0 {
			t.Fatalf("exit %d, stderr %q", r.code, r.err)
		}
		var list toolgatev1alpha1.ApprovalRequestList
		if err := json.Unmarshal([]byte(r.out), &list); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, r.out)
		}
		if list.Kind != "ApprovalRequestList" || len(list.Items) != 1 || list.Items[0].Name != "read-notes" || list.Items[0].Kind != "ApprovalRequest" {
			t.Fatalf("pending: %+v", list)
		}
		r = p.run(with(approver, "pending", "-o", "wide")...)
		if r.code != 0 || !strings.Contains(r.out, "read-notes") || strings.Contains(r.out, "write-notes") || !strings.Contains(r.out, "…") {
			t.Fatalf("pending -o wide: exit %d, out %q, err %q", r.code, r.out, r.err)
		}
		// The approver sees whose session the call would enter.
		lines := strings.Split(r.out, "\n")
		if head, row := strings.Fields(lines[0]), strings.Fields(lines[1]); len(head) < 2 || head[1] != "SESSION" || len(row) < 2 || row[1] != "s" {
			t.Fatalf("pending names no session: %q", r.out)
		}
	})

	t.Run("pending -A works for an approver bound in one namespace, and prints an empty list as []", func(t *testing.T) {
		// demo-approver is bound in ns only: a cluster-wide list is
		// forbidden to it, and pending shows what it may see instead,
		// saying so.
		r := p.run("toolgate", "--as", "demo-approver", "-n", ns.Name, "pending", "-A", "-o", "json")
		if r.code != 0 {
			t.Fatalf("exit %d, stderr %q", r.code, r.err)
		}
		var list toolgatev1alpha1.ApprovalRequestList
		if err := json.Unmarshal([]byte(r.out), &list); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, r.out)
		}
		if len(list.Items) != 1 || list.Items[0].Name != "read-notes" {
			t.Fatalf("pending: %+v", list)
		}
		if !strings.Contains(r.err, "namespace "+ns.Name) {
			t.Fatalf("no word of the namespace shown instead of every namespace: %q", r.err)
		}
		// Nothing waits in a namespace of its own: an empty list, never
		// null.
		r = p.run("toolgate", "--as", "lead-approver", "-n", "default", "pending", "-o", "json")
		if r.code != 0 || !strings.Contains(r.out, `"items": []`) {
			t.Fatalf("empty pending: exit %d, out %q, err %q", r.code, r.out, r.err)
		}
	})

	t.Run("transcript lists one session's committed calls", func(t *testing.T) {
		other := tu.MakeAgentSession(ns.Name, "other", "coding").Obj()
		other.Spec.Owner = "demo-agent"
		must(t, as.Create(ctx, other))
		must(t, as.Create(ctx, tu.MakeToolCall(ns.Name, "elsewhere", "other").Requester("demo-agent").Obj()))
		for i, name := range []string{"write-notes", "elsewhere"} {
			tc := &toolgatev1alpha1.ToolCall{}
			must(t, c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: name}, tc))
			tc.Status = tu.MakeToolCall(ns.Name, name, "").Committed(int64(i)).Obj().Status
			// A tool's output with terminal escapes (clear the screen,
			// set the clipboard): printed, they are shown, never obeyed.
			tc.Status.Result.Content = "wrote " + name + "\x1b[2J\x1b]52;c;ZXZpbA==\x07\u202e"
			must(t, c.Status().Update(ctx, tc))
		}
		r := p.run(with(agent, "transcript", "s")...)
		if r.code != 0 || !strings.Contains(r.out, "wrote write-notes") || strings.Contains(r.out, "elsewhere") {
			t.Fatalf("transcript: exit %d, out %q, err %q", r.code, r.out, r.err)
		}
		if strings.ContainsAny(r.out, "\x1b\x07\u202e") || !strings.Contains(r.out, `\u001b[2J`) {
			t.Fatalf("transcript passes a tool's terminal escapes through: %q", r.out)
		}
		// -o name: one name per committed call, in commit order.
		r = p.run(with(agent, "transcript", "s", "-o", "name")...)
		if r.code != 0 || strings.TrimSpace(r.out) != "toolcall.toolgate.dev/write-notes" {
			t.Fatalf("transcript -o name: exit %d, out %q, err %q", r.code, r.out, r.err)
		}
	})

	t.Run("trace and profile", func(t *testing.T) {
		r := p.run(with(approver, "trace", "write-notes")...)
		if r.code != 0 || !strings.Contains(r.out, "call write-notes") {
			t.Fatalf("trace: exit %d, out %q, err %q", r.code, r.out, r.err)
		}
		r = p.run(with(agent, "profile", "coding", "-o", "yaml")...)
		if r.code != 0 || !strings.Contains(r.out, "kind: ToolProfile") {
			t.Fatalf("profile -o yaml: exit %d, out %q, err %q", r.code, r.out, r.err)
		}
	})

	t.Run("check refuses a profile that would apply but not compile, naming the rule and the field", func(t *testing.T) {
		dir := t.TempDir()
		write := func(name, rule string) string {
			file := filepath.Join(dir, name+".yaml")
			doc := `apiVersion: toolgate.dev/v1alpha1
kind: ToolProfile
metadata: {name: ` + name + `}
spec:
  tools:
    - name: write
      description: Write a file.
      parameters: {type: object, additionalProperties: false, properties: {path: {type: string}}}
      output: {schema: {type: string}, render: {format: Text}}
      container: {image: tools:dev, command: [/bin/cat]}
  guards:
    - {name: no-dotfiles, deny: "` + rule + `", message: no dotfiles}
`
			if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			return file
		}
		admin := []string{"toolgate", "-n", ns.Name}
		r := p.run(append(admin, "check", "-f", write("typo", "call.args.pth.startsWith('.')"))...)
		if r.code == 0 || !strings.Contains(r.out, "toolprofile/typo: does not compile (ExpressionInvalid): guard no-dotfiles: deny: reads call.args.pth") {
			t.Errorf("a typo: exit %d, out %q, err %q", r.code, r.out, r.err)
		}
		// What kubectl apply accepts and the manager would not compile.
		if r := p.run("apply", "--dry-run=server", "-n", ns.Name, "-f", write("typo", "call.args.pth.startsWith('.')")); r.code != 0 {
			t.Errorf("apply --dry-run=server refused it: the check would not be needed: %q", r.err)
		}
		r = p.run(append(admin, "check", "-f", write("good", "call.args.path.startsWith('.')"))...)
		if r.code != 0 || !strings.Contains(r.out, "toolprofile/good: compiles (1 tools)") {
			t.Errorf("a good profile: exit %d, out %q, err %q", r.code, r.out, r.err)
		}
		r = p.run(append(admin, "check", "-f", write("bad", "call.args.path.startsWith('.')) &&"))...)
		if r.code == 0 || !strings.Contains(r.out, "toolprofile/bad: does not compile (ExpressionInvalid)") {
			t.Errorf("a syntax error: exit %d, out %q, err %q", r.code, r.out, r.err)
		}
	})

	t.Run("a name that does not exist exits non-zero", func(t *testing.T) {
		for _, args := range [][]string{
			with(agent, "transcript", "nosuch"), with(agent, "trace", "nosuch"),
			with(agent, "profile", "nosuch"), with(approver, "approve", "nosuch"),
		} {
			r := p.run(args...)
			if r.code == 0 || !strings.Contains(r.err, `"nosuch" not found in namespace "`+ns.Name+`"`) {
				t.Errorf("%v: exit %d, stderr %q", args, r.code, r.err)
			}
		}
	})

	t.Run("kubectl get toolgate works for each shipped role", func(t *testing.T) {
		// agent-only holds the agent role alone (demo-agent approves too).
		for _, user := range []string{"agent-only", "demo-approver"} {
			r := p.run("get", "toolgate", "-n", ns.Name, "--as", user)
			if r.code != 0 || !strings.Contains(r.out, "write-notes") {
				t.Errorf("as %s: exit %d, out %q, err %q", user, r.code, r.out, r.err)
			}
		}
	})

	t.Run("rotate-channel-key keeps the current key as the previous", func(t *testing.T) {
		mgr := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "manager-"}}
		must(t, c.Create(ctx, mgr))
		before, err := keys.Load(ctx, c, mgr.Name, "toolgate-channel-key")
		must(t, err)
		if r := p.run("toolgate", "-n", mgr.Name, "--as", "demo-approver", "rotate-channel-key"); r.code == 0 {
			t.Errorf("an approver rotated the manager's key: %q", r.out)
		}
		r := p.run("toolgate", "-n", mgr.Name, "rotate-channel-key")
		if r.code != 0 || !strings.Contains(r.out, "rollout restart deployment toolgate-controller-manager") {
			t.Fatalf("exit %d, out %q, err %q", r.code, r.out, r.err)
		}
		after, err := keys.Load(ctx, c, mgr.Name, "toolgate-channel-key")
		must(t, err)
		if after.Current.Equal(before.Current) || after.Previous == nil || !after.Previous.Equal(before.Current) {
			t.Fatal("the Secret does not hold a new key and the one it replaced")
		}
	})

	t.Run("usage and completion", func(t *testing.T) {
		r := p.run("toolgate", "pending", "--help")
		for _, want := range []string{"kubectl toolgate pending [flags]", "kubectl toolgate pending -A -o json", "--as string", "--request-timeout", "--all-namespaces"} {
			if !strings.Contains(r.out, want) {
				t.Errorf("help lacks %q:\n%s", want, r.out)
			}
		}
		// kubectl completes a plugin's words by running kubectl_complete-<name>.
		r = p.exec(filepath.Join(p.path, "kubectl_complete-toolgate"), "-n", ns.Name, "approve", "read")
		if r.code != 0 || !strings.Contains(r.out, "read-notes") || strings.Contains(r.out, "write-notes") {
			t.Fatalf("completion: exit %d, out %q, err %q", r.code, r.out, r.err)
		}
	})
}

// newPlugin writes a kubeconfig for cfg and puts the test binary on a
// PATH directory as kubectl-toolgate and kubectl_complete-toolgate.
func newPlugin(t *testing.T, cfg *rest.Config) *plugin {
	kubectl, err := testenv.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kubectl-toolgate", "kubectl_complete-toolgate"} {
		must(t, os.Symlink(self, filepath.Join(dir, name)))
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	file := filepath.Join(t.TempDir(), "kubeconfig")
	must(t, clientcmd.WriteToFile(*kc, file))
	return &plugin{t: t, kubectl: kubectl, kubeconfig: file, path: dir}
}

// installShipped creates the user ClusterRoles and the admission policies
// config/default installs, under their installed names.
func installShipped(t *testing.T, c client.Client, kubectl string) {
	out, err := exec.Command(kubectl, "kustomize", filepath.Join(testenv.RepoRoot(), "config", "default")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/default: %v", err)
	}
	file := filepath.Join(t.TempDir(), "default.yaml")
	must(t, os.WriteFile(file, out, 0o600))
	objs, err := testenv.ReadObjects(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		switch u.GetKind() {
		case "ClusterRole", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			must(t, c.Create(context.Background(), u))
		}
	}
}

func bind(t *testing.T, c client.Client, ns, user, clusterRole string) {
	must(t, c.Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}))
}

func impersonated(t *testing.T, env *testenv.Env, user string) client.Client {
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitForPolicies returns once the API server enforces the admission
// policies: they load asynchronously after their creation.
func waitForPolicies(t *testing.T, env *testenv.Env, ns string) {
	ctx := context.Background()
	agent := impersonated(t, env, "demo-agent")
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		probe := tu.MakeToolCall(ns, "probe", "s").Requester("someone-else").Obj()
		err := agent.Create(ctx, probe)
		if err != nil && strings.Contains(err.Error(), "spec.requester must be the user creating the call") {
			return
		}
		if err == nil {
			must(t, env.Client.Delete(ctx, probe))
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the admission policies are not enforced after 30s: %v", err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

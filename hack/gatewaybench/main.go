// Command gatewaybench measures what the MCP gateway adds to a tool call:
// on envtest (a real kube-apiserver and etcd) with the controllers running
// and the Process sandbox, it interleaves, one at a time, a ToolCall created
// directly and watched until it commits (as pkg/agent does), and the same
// call made as an MCP tools/call through the gateway over HTTP (go-sdk
// client, revision 2026-07-28, and again 2025-11-25), and prints the
// latency of each and the difference (docs/performance.md).
//
//	go run ./hack/gatewaybench -n 50
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/gateway"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testmanager"
	tu "github.com/toolgate/toolgate/internal/testutil"
	"github.com/toolgate/toolgate/pkg/agent"
)

const (
	ns       = "bench"
	session  = "s"
	audience = "toolgate-gateway"
)

func main() {
	n := flag.Int("n", 50, "measured calls of each kind")
	warmup := flag.Int("warmup", 3, "unmeasured calls of each kind first")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	if err := run(*n, *warmup); err != nil {
		fmt.Fprintln(os.Stderr, "gatewaybench:", err)
		os.Exit(1)
	}
}

// kind is one way of making a call; each returns when the call committed.
type kind struct {
	name string
	call func(ctx context.Context, turn int64) error
	took []time.Duration
}

func run(n, warmup int) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, err := testenv.Start()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	workspace, err := os.MkdirTemp("", "gatewaybench-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(workspace) }()
	if err := install(ctx, env); err != nil {
		return err
	}
	done, err := testmanager.Start(ctx, env, workspace)
	if err != nil {
		return err
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "gatewaybench: the manager failed:", err)
		}
	}()
	if err := profileReady(ctx, env.Client); err != nil {
		return err
	}

	user := "system:serviceaccount:" + ns + ":agent"
	direct, err := asUser(env, user)
	if err != nil {
		return err
	}
	if err := direct.Create(ctx, &toolgatev1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: session},
		Spec:       toolgatev1alpha1.AgentSessionSpec{Owner: user, ProfileRef: toolgatev1alpha1.LocalObjectReference{Name: "p"}},
	}); err != nil {
		return err
	}
	server, err := startGateway(ctx, env)
	if err != nil {
		return err
	}
	defer server.Close()
	tok, err := token(ctx, env, "agent", audience)
	if err != nil {
		return err
	}
	newest, err := connect(ctx, server.URL, tok, "")
	if err != nil {
		return err
	}
	defer func() { _ = newest.Close() }()
	older, err := connect(ctx, server.URL, tok, "2025-11-25")
	if err != nil {
		return err
	}
	defer func() { _ = older.Close() }()

	kinds := []*kind{
		{name: "ToolCall created directly, watched to Committed", call: func(ctx context.Context, turn int64) error {
			return directCall(ctx, direct, user, turn)
		}},
		{name: "MCP tools/call through the gateway (2026-07-28)", call: func(ctx context.Context, turn int64) error {
			return mcpCall(ctx, newest, turn)
		}},
		{name: "MCP tools/call through the gateway (2025-11-25)", call: func(ctx context.Context, turn int64) error {
			return mcpCall(ctx, older, turn)
		}},
	}
	var turn int64
	for round := range warmup + n {
		// Rotate the order each round, so that no kind always follows
		// another.
		for i := range kinds {
			k := kinds[(i+round)%len(kinds)]
			start := time.Now()
			if err := k.call(ctx, turn); err != nil {
				return fmt.Errorf("%s, turn %d: %w", k.name, turn, err)
			}
			if round >= warmup {
				k.took = append(k.took, time.Since(start))
			}
			turn++
		}
	}

	fmt.Printf("%d measured calls of each kind (after %d unmeasured), one at a time, interleaved\n\n", n, warmup)
	fmt.Println("| | p50 | p95 | mean |")
	fmt.Println("|---|---|---|---|")
	for _, k := range kinds {
		fmt.Printf("| %s | %s | %s | %s |\n", k.name, ms(pct(k.took, 50)), ms(pct(k.took, 95)), ms(mean(k.took)))
	}
	for _, k := range kinds[1:] {
		fmt.Printf("| added by the gateway (%s) | %s | %s | %s |\n", k.name[len(k.name)-11:len(k.name)-1],
			ms(pct(k.took, 50)-pct(kinds[0].took, 50)), ms(pct(k.took, 95)-pct(kinds[0].took, 95)), ms(mean(k.took)-mean(kinds[0].took)))
	}
	return nil
}

// install makes the namespace, the shipped policies and roles, the agent
// ServiceAccount (role toolgate-agent), the gateway's ServiceAccount (its
// shipped roles) and a profile with one tool.
func install(ctx context.Context, env *testenv.Env) error {
	root := testenv.RepoRoot()
	objs, err := testenv.ReadObjects(
		filepath.Join(root, "config", "admission", "approval_policy.yaml"),
		filepath.Join(root, "config", "rbac", "user_roles.yaml"),
		filepath.Join(root, "config", "gateway", "role.yaml"))
	if err != nil {
		return err
	}
	k := env.Client
	for _, ns := range []string{ns, "toolgate-system"} {
		if err := k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}
	for _, u := range objs {
		if err := k.Create(ctx, u); err != nil {
			return err
		}
	}
	sa := func(namespace, name string) rbacv1.Subject {
		return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}
	}
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "toolgate-system", Name: "gateway"}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "agent"}, Subjects: []rbacv1.Subject{sa(ns, "agent")}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gateway-impersonator"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "gateway-impersonator"}, Subjects: []rbacv1.Subject{sa("toolgate-system", "gateway")}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gateway"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "gateway"}, Subjects: []rbacv1.Subject{sa("toolgate-system", "gateway")}},
	} {
		if err := k.Create(ctx, o); err != nil {
			return err
		}
	}
	echo := tu.MakeTool("echo")
	echo.Container.Command = []string{"/bin/sh", "-c", "cat"}
	object := `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`
	echo.Output = toolgatev1alpha1.OutputDeclaration{Schema: tu.JSON(object), Render: toolgatev1alpha1.RenderSpec{Format: toolgatev1alpha1.RenderJSON}}
	p := tu.MakeToolProfile(ns, "p").Tools(echo.Obj()).Preset(toolgatev1alpha1.PresetTrusted).Sandbox(func(s *toolgatev1alpha1.SandboxPolicy) {
		s.Provider = toolgatev1alpha1.SandboxProviderProcess
		s.Mode = toolgatev1alpha1.SandboxWorkspaceWrite
	}).Obj()
	return k.Create(ctx, p)
}

// profileReady waits for the profile to be Ready.
func profileReady(ctx context.Context, k client.Client) error {
	p := &toolgatev1alpha1.ToolProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}}
	deadline := time.Now().Add(time.Minute)
	for {
		if err := k.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		if apimeta.IsStatusConditionTrue(p.Status.Conditions, toolgatev1alpha1.ConditionReady) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the profile did not become Ready")
		}
		time.Sleep(100 * time.Millisecond) // setup only, never measured
	}
}

func asUser(env *testenv.Env, user string) (client.WithWatch, error) {
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	// The gateway's client-side bound for one identity, so that neither
	// side is throttled by client-go's default (5 requests per second).
	cfg.QPS, cfg.Burst = 50, 100
	return client.NewWithWatch(cfg, client.Options{Scheme: env.Scheme})
}

func token(ctx context.Context, env *testenv.Env, sa string, audiences ...string) (string, error) {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return "", err
	}
	namespace := ns
	if sa == "gateway" {
		namespace = "toolgate-system"
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// startGateway serves the gateway over loopback HTTP with its own
// ServiceAccount's token.
func startGateway(ctx context.Context, env *testenv.Env) (*httptest.Server, error) {
	tok, err := token(ctx, env, "gateway")
	if err != nil {
		return nil, err
	}
	cfg := &rest.Config{Host: env.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}, BearerToken: tok}
	gw, err := gateway.Build(ctx, cfg, audience, gateway.DefaultReviewTTL, gateway.Options{})
	if err != nil {
		return nil, err
	}
	return httptest.NewServer(gw.Handler()), nil
}

type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

func connect(ctx context.Context, url, tok, revision string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "gatewaybench", Version: "v0"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   fmt.Sprintf("%s/mcp/%s/%s", url, ns, session),
		HTTPClient: &http.Client{Transport: bearer(tok)},
	}, &mcp.ClientSessionOptions{ProtocolVersion: revision})
}

// directCall creates the call at (turn, 0) as the agent and watches it until
// it commits.
func directCall(ctx context.Context, c client.WithWatch, user string, turn int64) error {
	tc := &toolgatev1alpha1.ToolCall{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: agent.CallName(session, turn, 0)},
		Spec: toolgatev1alpha1.ToolCallSpec{
			SessionRef: toolgatev1alpha1.LocalObjectReference{Name: session}, Turn: turn, TurnSize: 1,
			CallID: agent.CallID(turn, 0), Tool: "echo", Arguments: `{"text":"hi"}`, Requester: user,
		},
	}
	if err := c.Create(ctx, tc); err != nil {
		return err
	}
	w, err := c.Watch(ctx, &toolgatev1alpha1.ToolCallList{}, &client.ListOptions{
		Namespace: ns, FieldSelector: fields.OneTermEqualSelector("metadata.name", tc.Name),
		Raw: &metav1.ListOptions{ResourceVersion: tc.ResourceVersion},
	})
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			return fmt.Errorf("watch error")
		}
		if got, ok := ev.Object.(*toolgatev1alpha1.ToolCall); ok && got.Committed() {
			if got.Status.Result.Outcome != toolgatev1alpha1.OutcomeSucceeded {
				return fmt.Errorf("outcome %s %s", got.Status.Result.Outcome, got.Status.Result.ErrorCode)
			}
			return nil
		}
	}
	return fmt.Errorf("the watch ended")
}

func mcpCall(ctx context.Context, cs *mcp.ClientSession, turn int64) error {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{
		Name: "echo", Arguments: map[string]any{"text": "hi"},
		Meta: mcp.Meta{agent.MetaTurn: turn, agent.MetaIndex: 0, agent.MetaTurnSize: 1},
	})
	if err != nil {
		return err
	}
	if res.IsError {
		return fmt.Errorf("isError: %v", res.Meta[agent.MetaCode])
	}
	return nil
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func mean(d []time.Duration) time.Duration {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

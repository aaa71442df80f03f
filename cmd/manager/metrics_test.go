package main

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/toolgate/toolgate/internal/testenv"
)

// TestMetricsNeedAnAuthorizedCaller: the manager serves its metrics over
// HTTPS to callers the API server authenticates and authorizes for get on
// /metrics (the shipped metrics-reader ClusterRole): no token is 401, a
// ServiceAccount without the role (a tool pod's, say) is 403, one bound to
// it reads them.
func TestMetricsNeedAnAuthorizedCaller(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	objs, err := testenv.ReadObjects(filepath.Join(testenv.RepoRoot(), "config", "rbac", "metrics_auth_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" && o.GetName() == "metrics-reader" {
			if err := env.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsOptions(addr, true), HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the manager stopped with %v", err)
		}
	}()

	cs := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "scraper"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "scraper", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the manager's certificate is self-signed
	get := func(token string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, _, err := get("")
		if err == nil {
			if code != http.StatusUnauthorized {
				t.Fatalf("no token: %d, want 401", code)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the metrics endpoint never answered over HTTPS: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, _, err := get(tr.Status.Token); err != nil || code != http.StatusForbidden {
		t.Fatalf("a ServiceAccount without the role: %d %v, want 403", code, err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "scraper"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Authorization answers may be cached by the server for a moment.
	deadline = time.Now().Add(30 * time.Second)
	for {
		code, body, err := get(tr.Status.Token)
		if err == nil && code == http.StatusOK {
			if !strings.Contains(body, "go_goroutines") && !strings.Contains(body, "controller_runtime") {
				t.Fatalf("the metrics read lack the manager's: %.200s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a ServiceAccount bound to metrics-reader: %d %v", code, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

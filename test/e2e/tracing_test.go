//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/toolgate/toolgate/internal/testenv"
)

// jaegerQuery is the suite's Jaeger's query API (hack/jaeger.yaml):
// the local install exports its traces there.
const jaegerQuery = "http://127.0.0.1:16686"

// startJaeger runs the cached Jaeger (hack/build-jaeger.sh) for the whole
// suite: an OTLP receiver on the bridge's host address, which the manager's
// and the gateway's pods reach.
func startJaeger() {
	out, err := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "build-jaeger.sh")).Output()
	Expect(err).NotTo(HaveOccurred(), "hack/build-jaeger.sh")
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	cmd := exec.Command(lines[len(lines)-1], "--config", filepath.Join(testenv.RepoRoot(), "hack", "jaeger.yaml"))
	Expect(cmd.Start()).To(Succeed())
	DeferCleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	Eventually(func() error {
		resp, err := http.Get(jaegerQuery + "/api/services")
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}, 60*time.Second, 500*time.Millisecond).Should(Succeed(), "Jaeger's query API")
}

// jaegerSpan is a span as Jaeger's query API returns it.
type jaegerSpan struct {
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags      []map[string]any `json:"tags"`
	ProcessID string           `json:"processID"`
}

// parent is the span's CHILD_OF reference ("" for a root).
func (s jaegerSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// jaegerTrace is the trace's spans, and each process's service name.
func jaegerTrace(traceID string) ([]jaegerSpan, map[string]string) {
	resp, err := http.Get(jaegerQuery + "/api/traces/" + traceID)
	if err != nil {
		return nil, nil
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Data []struct {
			Spans     []jaegerSpan `json:"spans"`
			Processes map[string]struct {
				ServiceName string `json:"serviceName"`
			} `json:"processes"`
		} `json:"data"`
	}
	if json.NewDecoder(resp.Body).Decode(&body) != nil || len(body.Data) == 0 {
		return nil, nil
	}
	services := map[string]string{}
	for id, p := range body.Data[0].Processes {
		services[id] = p.ServiceName
	}
	return body.Data[0].Spans, services
}

// traceparent is a W3C trace context of a made-up agent span, sampled.
func traceparent(traceID, spanID string) string { return fmt.Sprintf("00-%s-%s-01", traceID, spanID) }

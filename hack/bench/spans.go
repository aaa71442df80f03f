package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"sync"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// spans receives the manager's spans over OTLP/gRPC (the local install
// exports to the pod network's host address), so that the bench can say
// where a warm call's time goes, to the microsecond, by the manager's and
// the runner's own clocks (one host: one clock).
type spans struct {
	coltracepb.UnimplementedTraceServiceServer
	mu      sync.Mutex
	byTrace map[string][]span
	srv     *grpc.Server
}

type span struct {
	name       string
	start, end time.Time
	attrs      map[string]string
}

// receiveSpans listens on addr; an error means no hop profile (another
// receiver, the e2e suite's Jaeger, holds the address, say).
func receiveSpans(addr string) (*spans, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &spans{byTrace: map[string][]span{}, srv: grpc.NewServer()}
	coltracepb.RegisterTraceServiceServer(s.srv, s)
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

func (s *spans) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				attrs := map[string]string{}
				for _, kv := range sp.Attributes {
					v := kv.Value.GetStringValue()
					if v == "" {
						v = fmt.Sprint(kv.Value.GetIntValue())
					}
					attrs[kv.Key] = v
				}
				id := hex.EncodeToString(sp.TraceId)
				s.byTrace[id] = append(s.byTrace[id], span{name: sp.Name,
					start: time.Unix(0, int64(sp.StartTimeUnixNano)), end: time.Unix(0, int64(sp.EndTimeUnixNano)), attrs: attrs})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// of returns the spans of a trace, waiting up to wait for want of them to
// have arrived (the manager exports in batches, every few seconds).
func (s *spans) of(traceID string, want func([]span) bool, wait time.Duration) []span {
	for deadline := time.Now().Add(wait); ; time.Sleep(100 * time.Millisecond) {
		s.mu.Lock()
		got := append([]span(nil), s.byTrace[traceID]...)
		s.mu.Unlock()
		if want(got) || time.Now().After(deadline) {
			return got
		}
	}
}

func (s *spans) stop() { s.srv.Stop() }

// find returns the first span named name whose attribute key is value
// (any, for an empty key).
func find(ss []span, name, key, value string) (span, bool) {
	for _, sp := range ss {
		if sp.name == name && (key == "" || sp.attrs[key] == value) {
			return sp, true
		}
	}
	return span{}, false
}

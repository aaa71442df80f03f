package pod

import (
	"context"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/toolgate/toolgate/internal/runner"
)

// A warm pod's runner is connected to and greeted while the call's
// dispatch boundary and the pod's claim are written: the hand-over, which
// waits for both, then only seals and sends the request. Nothing of the
// call crosses the connection before then, so what the boundary and the
// claim protect is unchanged: a claim that fails closes the connection
// with nothing sent, and a pod changed since the greeting fails its claim.

// Bounds of an early greeting: how long its connection and greeting may
// take, and how long a greeted connection waits for its hand-over before
// it is closed (a boundary or a claim that never became durable).
const (
	greetTimeout = 2 * time.Second
	greetHold    = 10 * time.Second
)

// greeting is a connection to a reserved warm pod's runner, opened and
// greeted ahead of the hand-over (greetEarly).
type greeting struct {
	pod   types.UID
	ip    string
	done  chan struct{} // closed once g or err is set
	taken chan struct{} // closed by takeGreeted
	g     *runner.Greeted
	err   error
}

// dialer is Dial, or TCP with keep-alives.
func (p *Provider) dialer() func(ctx context.Context, addr string) (net.Conn, error) {
	if p.Dial != nil {
		return p.Dial
	}
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}
	return func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
}

// runnerAddr is the address of the pod's runner.
func runnerAddr(pod *corev1.Pod) string {
	return net.JoinHostPort(pod.Status.PodIP, fmt.Sprint(runner.Port))
}

// greetEarly connects to the warm pod reserved for the attempt with key
// and reads its runner's greeting, in the background. A pod whose runner
// is not reported running is left to the hand-over.
func (p *Provider) greetEarly(key string, pod *corev1.Pod) {
	if pod.Status.PodIP == "" || !running(pod) {
		return
	}
	gr := &greeting{pod: pod.UID, ip: pod.Status.PodIP, done: make(chan struct{}), taken: make(chan struct{})}
	p.mu.Lock()
	a := p.attemptLocked(key)
	if a.greeting != nil {
		p.mu.Unlock()
		return
	}
	a.greeting = gr
	p.mu.Unlock()
	addr, channelKey := runnerAddr(pod), p.keyOf(pod)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), greetTimeout)
		conn, err := p.dialer()(ctx, addr)
		cancel()
		if err == nil {
			if gr.g, err = runner.Greet(conn, channelKey); err != nil {
				_ = conn.Close()
				gr.g = nil
			}
		}
		gr.err = err
		close(gr.done)
		t := time.NewTimer(greetHold)
		defer t.Stop()
		select {
		case <-gr.taken:
		case <-t.C:
			p.dropGreeting(key, gr)
		}
	}()
}

// takeGreeted hands over the connection greeted early for the attempt
// with key, if it is to pod as the follower now sees it; nil otherwise
// (the follower dials). Once taken, the connection is the caller's.
func (p *Provider) takeGreeted(ctx context.Context, key string, pod *corev1.Pod) *runner.Greeted {
	p.mu.Lock()
	var gr *greeting
	if a := p.attempts[key]; a != nil {
		gr, a.greeting = a.greeting, nil
		p.tidyLocked(key)
	}
	p.mu.Unlock()
	if gr == nil {
		return nil
	}
	close(gr.taken)
	select {
	case <-gr.done:
	case <-ctx.Done():
		go func() {
			<-gr.done
			closeGreeted(gr.g)
		}()
		return nil
	}
	if gr.g == nil || gr.pod != pod.UID || gr.ip != pod.Status.PodIP {
		closeGreeted(gr.g)
		return nil
	}
	return gr.g
}

// dropGreeting closes the attempt's early connection gr unless it was
// taken: whoever removes it from the map owns it.
func (p *Provider) dropGreeting(key string, gr *greeting) {
	p.mu.Lock()
	a := p.attempts[key]
	if gr == nil && a != nil {
		gr = a.greeting
	}
	mine := gr != nil && a != nil && a.greeting == gr
	if mine {
		a.greeting = nil
		p.tidyLocked(key)
	}
	p.mu.Unlock()
	if mine {
		gr.drop()
	}
}

// drop closes a greeting whoever removed it from its attempt's record
// owns: its connection once greeted.
func (gr *greeting) drop() {
	close(gr.taken)
	go func() {
		<-gr.done
		closeGreeted(gr.g)
	}()
}

func closeGreeted(g *runner.Greeted) {
	if g != nil {
		_ = g.Close()
	}
}

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// maxTurnProbes bounds the turns Submit tries when the session's status
// lags behind calls already made.
const maxTurnProbes = 64

// Client submits tool calls as one identity: the user of its credentials.
type Client struct {
	c       client.WithWatch
	user    string
	retries []time.Duration
}

// Client-side bounds on the Client's API requests when cfg sets none
// (client-go's default, 5 per second, would queue a turn of a few calls).
const (
	defaultQPS   = 50
	defaultBurst = 100
)

// New returns a Client acting with cfg; it asks the API server who cfg's
// credentials are (the identity its sessions and calls are made as).
func New(ctx context.Context, cfg *rest.Config) (*Client, error) {
	if cfg.QPS == 0 {
		cfg = rest.CopyConfig(cfg)
		cfg.QPS, cfg.Burst = defaultQPS, defaultBurst
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(toolgatev1alpha1.AddToScheme(scheme))
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("asking the API server who these credentials are: %w", err)
	}
	return NewForClient(c, r.Status.UserInfo.Username), nil
}

// NewForClient returns a Client using c, whose credentials are user's.
func NewForClient(c client.WithWatch, user string) *Client {
	return &Client{c: c, user: user, retries: createRetries}
}

// User is the identity the Client acts as.
func (c *Client) User() string { return c.user }

// SessionOptions are the settings of a session Open creates.
type SessionOptions struct {
	// Profile names the ToolProfile governing the session's calls
	// (required to create one).
	Profile string
	// MaxParallel bounds the parallel calls of a turn (0: the API's
	// default).
	MaxParallel int32
	// Workspace is the session's workspace volume (nil: none).
	Workspace *toolgatev1alpha1.WorkspaceSpec
}

// Session is an AgentSession the Client's identity owns.
type Session struct {
	c         *Client
	Namespace string
	Name      string
}

// ErrNotOwner says a session belongs to another identity: only its owner's
// calls enter it.
var ErrNotOwner = errors.New("the session belongs to another identity")

// Open attaches to the session, creating it (owned by the Client's
// identity) when it does not exist. Admission decides whether the identity
// may use the profile.
func (c *Client) Open(ctx context.Context, namespace, name string, opts SessionOptions) (*Session, error) {
	s, err := c.Attach(ctx, namespace, name)
	if err == nil || !apierrors.IsNotFound(err) {
		return s, err
	}
	if opts.Profile == "" {
		return nil, fmt.Errorf("agentsession %s/%s does not exist, and creating it needs a profile", namespace, name)
	}
	obj := &toolgatev1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: toolgatev1alpha1.AgentSessionSpec{
			Owner: c.user, ProfileRef: toolgatev1alpha1.LocalObjectReference{Name: opts.Profile},
			MaxParallel: opts.MaxParallel, Workspace: opts.Workspace,
		},
	}
	_, err = retrying(ctx, c.retries, func() error { return c.c.Create(ctx, obj) })
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating agentsession %s/%s: %w", namespace, name, err)
	}
	return c.Attach(ctx, namespace, name)
}

// Attach returns the existing session, which must be the identity's own.
func (c *Client) Attach(ctx context.Context, namespace, name string) (*Session, error) {
	obj := &toolgatev1alpha1.AgentSession{}
	if err := c.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj); err != nil {
		return nil, err
	}
	if obj.Spec.Owner != c.user {
		return nil, fmt.Errorf("agentsession %s/%s: %w (%s)", namespace, name, ErrNotOwner, obj.Spec.Owner)
	}
	return &Session{c: c, Namespace: namespace, Name: name}, nil
}

// Call is one tool call of a model turn, as the model produced it.
type Call struct {
	// CallID is the model's identifier of the call; empty gives one unique
	// in the session (CallID(turn, index)).
	CallID string
	// Tool is the tool's name.
	Tool string
	// Arguments is the call's arguments, kept byte for byte; empty means
	// {}.
	Arguments json.RawMessage
}

// StartTurn is the first turn a new turn of the session may take: 0 for a
// session that has seen no call, else the turn after its current one.
// Calls made since the session's status was written have taken later
// turns; Submit (and the gateway) try the next turn when they find a turn
// taken.
func StartTurn(s *toolgatev1alpha1.AgentSession) int64 {
	if s.Status.CommitCursor != nil || s.Status.CommittedCalls > 0 || s.Status.CurrentTurn > 0 {
		return s.Status.CurrentTurn + 1
	}
	return 0
}

// Submit makes calls one model turn of the session, in that order (index i
// is calls[i]), after every turn made so far, and returns the turn.
func (s *Session) Submit(ctx context.Context, calls []Call) (*Turn, error) {
	if len(calls) == 0 || len(calls) > 1024 {
		return nil, fmt.Errorf("a turn holds 1 to 1024 calls, not %d", len(calls))
	}
	obj := &toolgatev1alpha1.AgentSession{}
	if err := s.c.c.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Name}, obj); err != nil {
		return nil, err
	}
	turn := StartTurn(obj)
	for range maxTurnProbes {
		// The first call claims the turn; the rest follow it.
		_, err := s.create(ctx, turn, 0, calls, false)
		if apierrors.IsAlreadyExists(err) {
			turn++
			continue
		}
		if err != nil {
			return nil, err
		}
		return s.SubmitAt(ctx, turn, calls)
	}
	return nil, fmt.Errorf("no free turn found after %d tries from turn %d", maxTurnProbes, StartTurn(obj))
}

// SubmitAt makes calls turn number turn of the session. It is idempotent:
// a call already made at its place with the same tool and arguments is
// kept, so a Submit interrupted half-way is completed by SubmitAt with the
// same turn; a different call at a place is an error.
func (s *Session) SubmitAt(ctx context.Context, turn int64, calls []Call) (*Turn, error) {
	t := &Turn{s: s, Number: turn}
	for i := range calls {
		name, err := s.create(ctx, turn, int32(i), calls, true)
		if err != nil {
			return nil, err
		}
		t.Names = append(t.Names, name)
	}
	return t, nil
}

// create makes call index of the turn, and returns its name; attach
// accepts the same call already made.
func (s *Session) create(ctx context.Context, turn int64, index int32, calls []Call, attach bool) (string, error) {
	call := calls[index]
	place := Place{Turn: turn, Index: index, TurnSize: int32(len(calls)), CallID: call.CallID}
	tc := NewCall(s.Namespace, s.Name, place, call.Tool, string(call.Arguments), s.c.user)
	WithTrace(ctx, tc)
	// A create the API server answered with a transient error is sent
	// again; if an earlier attempt landed, the call found is compared like
	// one a resumed SubmitAt finds, so a retry never claims a second turn.
	found, err := createCall(ctx, s.c.c, tc, attach, s.c.retries)
	if err != nil && found != nil && attach {
		return "", fmt.Errorf("turn %d index %d of agentsession %s/%s already holds another call (toolcall %s)", turn, index, s.Namespace, s.Name, found.Name)
	}
	if err != nil {
		return "", err // on AlreadyExists, Submit takes the next turn
	}
	return found.Name, nil
}

// DeferredContexts are the contexts the session released for the model's
// next step: those of its last complete turn, in call order, and that
// turn's number (-1 before any).
func (s *Session) DeferredContexts(ctx context.Context) ([]toolgatev1alpha1.SessionContext, int64, error) {
	obj := &toolgatev1alpha1.AgentSession{}
	if err := s.c.c.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Name}, obj); err != nil {
		return nil, 0, err
	}
	return obj.Status.DeferredContexts, obj.Status.CommittedTurn, nil
}

// Cancel asks toolgate to cancel the named call of the session: its body
// is stopped and it settles as cancelled (unless it already settled).
func (s *Session) Cancel(ctx context.Context, name string) error {
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"cancelRequested":true}}`))
	return s.c.c.Patch(ctx, &toolgatev1alpha1.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name}}, patch)
}

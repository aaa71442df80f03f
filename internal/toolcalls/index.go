package toolcalls

import (
	"context"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// IndexCallSession indexes ToolCalls by their session's name: the field
// index the Planner lists by where the cache has no store for Index
// (NewIndex), and the API server's selectable field.
const IndexCallSession = "spec.sessionRef.name"

// callIndexName is the ToolCall informer's index by namespace and session,
// read by Index.
const callIndexName = "toolgate.dev/session"

// Index reads a session's calls straight from the cache's store,
// without copying them. A session's calls are read several times per call
// (planning, waking the next in line, the session's dry run of its
// schedule), and the cache's List copies every one of them each time: with
// a session of a thousand calls, the copies and the garbage they left were
// most of the manager's CPU, and a session's rate fell as it grew
// (docs/performance.md, "A session's calls read in place"). The calls it
// returns are the cache's own: read only, as with UnsafeDisableDeepCopy.
type Index struct{ indexer toolscache.Indexer }

// NewIndex adds the index to the cache's ToolCall informer. A cache
// whose informer has no store of its own (a cache of several namespaces
// joins one informer per namespace) gets the field index the Planner
// lists by instead, and nil: one index of a session's calls either way.
func NewIndex(ctx context.Context, c cache.Cache) (*Index, error) {
	inf, err := c.GetInformer(ctx, &toolgatev1alpha1.ToolCall{})
	if err != nil {
		return nil, fmt.Errorf("the ToolCall informer: %w", err)
	}
	store, ok := inf.(interface{ GetIndexer() toolscache.Indexer })
	if !ok {
		if err := c.IndexField(ctx, &toolgatev1alpha1.ToolCall{}, IndexCallSession, func(o client.Object) []string {
			return []string{o.(*toolgatev1alpha1.ToolCall).Spec.SessionRef.Name}
		}); err != nil {
			return nil, fmt.Errorf("indexing ToolCalls by session: %w", err)
		}
		return nil, nil
	}
	if err := inf.AddIndexers(toolscache.Indexers{callIndexName: callIndexKeys}); err != nil {
		return nil, fmt.Errorf("indexing ToolCalls by session: %w", err)
	}
	return &Index{indexer: store.GetIndexer()}, nil
}

// callIndexKeys is the index function: a call's namespace and session.
func callIndexKeys(o any) ([]string, error) {
	tc, ok := o.(*toolgatev1alpha1.ToolCall)
	if !ok {
		return nil, nil
	}
	return []string{callIndexKey(tc.Namespace, tc.Spec.SessionRef.Name)}, nil
}

func callIndexKey(namespace, session string) string { return namespace + "/" + session }

// Calls are the session's calls in the cache, in no particular order.
func (x *Index) Calls(namespace, session string) ([]*toolgatev1alpha1.ToolCall, error) {
	objs, err := x.indexer.ByIndex(callIndexName, callIndexKey(namespace, session))
	if err != nil {
		return nil, err
	}
	out := make([]*toolgatev1alpha1.ToolCall, 0, len(objs))
	for _, o := range objs {
		if tc, ok := o.(*toolgatev1alpha1.ToolCall); ok {
			out = append(out, tc)
		}
	}
	return out, nil
}

package controller

import (
	"errors"
	"testing"

	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TestAFailedStatusWriteIsCountedByWhy: the API server refusing a write
// (validation, admission, size) is told apart from a conflict, which is
// retried, and from an API server that is away.
func TestAFailedStatusWriteIsCountedByWhy(t *testing.T) {
	gr := schema.GroupResource{Group: "toolgate.dev", Resource: "toolcalls"}
	for _, c := range []struct {
		err  error
		want string
	}{
		{apierrors.NewConflict(gr, "c1", errors.New("changed")), writeConflict},
		{apierrors.NewInvalid(schema.GroupKind{Group: "toolgate.dev", Kind: "ToolCall"}, "c1", field.ErrorList{field.Invalid(field.NewPath("status"), "", "bad")}), writeRefused},
		{apierrors.NewForbidden(gr, "c1", errors.New("admission")), writeRefused},
		{apierrors.NewRequestEntityTooLargeError("too large"), writeRefused},
		{apierrors.NewServiceUnavailable("away"), writeUnavailable},
		{errors.New("connection reset"), writeUnavailable},
	} {
		before := promtestutil.ToFloat64(statusWriteErrors.WithLabelValues("toolcall", c.want))
		countWriteError("toolcall", c.err)
		if got := promtestutil.ToFloat64(statusWriteErrors.WithLabelValues("toolcall", c.want)) - before; got != 1 {
			t.Errorf("%v: %s counted %v times", c.err, c.want, got)
		}
	}
}

package toolcalls

import (
	"testing"

	tu "github.com/toolgate/toolgate/internal/testutil"
)

// TestToolcallsNeitherReconcilesNorRuns: what is known of calls never
// reaches a reconciler or a sandbox.
func TestToolcallsNeitherReconcilesNorRuns(t *testing.T) {
	tu.ForbidDeps(t, "github.com/toolgate/toolgate/internal/toolcalls",
		"github.com/toolgate/toolgate/internal/controller", "github.com/toolgate/toolgate/internal/providers/sandbox")
}

package controller

import (
	"testing"

	tu "github.com/toolgate/toolgate/internal/testutil"
)

// TestControllersNameNoProvider: the controllers consume the seams'
// contracts; only cmd/manager names a concrete provider.
func TestControllersNameNoProvider(t *testing.T) {
	const providers = "github.com/toolgate/toolgate/internal/providers/"
	tu.ForbidDeps(t, "github.com/toolgate/toolgate/internal/controller",
		providers+"approval/", providers+"sandbox/")
}

// Package testutil holds fluent builders of valid toolgate objects for tests:
// each Make* returns a wrapper around an object the API server accepts, and
// each method changes one thing, so a test states only what it cares about.
package testutil

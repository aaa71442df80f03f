// Package lifecycle provides Scope, the owner of registrations: tools,
// listeners and providers are registered under a scope, and disposing the
// scope removes every registration it (and its child scopes) made. A
// registration that survives its scope's disposal is a leak; the seam tests
// prove there is none.
package lifecycle

// Package sandbox is the sandbox seam's contract: a Provider runs one attempt
// of a tool body (an exact argv in a tool image, or a built-in workspace
// tool) under the profile's sandbox policy, and reports enforcement honestly.
// Providers: process (a local subprocess, for development and tests; it does
// not isolate) and pod (a constrained pod per call). Consumers use this
// package only.
package sandbox

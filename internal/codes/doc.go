// Package codes is the stable error-code vocabulary, written once. It is a
// leaf (standard library only) so that the in-pod runner and the built-in
// tools can name codes without linking the pipeline; internal/pipeline gives
// the same strings its typed Code and maps them to outcomes.
package codes

// Package profile compiles a ToolProfile into a pipeline registry: JSON
// schemas, CEL expressions (pre-execute rules, guards, post-execute rules and
// concurrency classifiers, each with a cost limit) and render templates. A
// compile error names the tool or rule and its reason, and becomes the
// profile's Ready=False condition; a compiled profile is immutable and is
// replaced, never edited, when the ToolProfile changes.
package profile

package profile

import (
	"fmt"
	"regexp"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// redaction is a post-execute rule's compiled redact list: RE2 patterns
// (linear time, whatever the input) applied in order to every string of a
// value.
type redaction []redactPattern

type redactPattern struct {
	re          *regexp.Regexp
	replacement string
}

// defaultReplacement is what a match becomes when the rule names nothing.
const defaultReplacement = "[redacted]"

// compileRedact compiles a rule's redact list (nil when it has none).
func compileRedact(patterns []toolgatev1alpha1.RedactPattern) (redaction, error) {
	var out redaction
	for i, p := range patterns {
		re, err := regexp.Compile(p.Pattern)
		if err != nil {
			return nil, fmt.Errorf("pattern %d: %v", i, err)
		}
		replacement := defaultReplacement
		if p.Replacement != nil {
			replacement = *p.Replacement
		}
		out = append(out, redactPattern{re: re, replacement: replacement})
	}
	return out, nil
}

// value returns v with every match replaced in each of its strings (the
// arrays' elements and the objects' values, at any depth; keys are kept),
// and whether anything matched.
func (r redaction) value(v any) (any, bool) {
	switch v := v.(type) {
	case string:
		out := v
		for _, p := range r {
			out = p.re.ReplaceAllString(out, p.replacement)
		}
		return out, out != v
	case []any:
		var copied []any
		for i, e := range v {
			if n, changed := r.value(e); changed {
				if copied == nil {
					copied = append([]any(nil), v...)
				}
				copied[i] = n
			}
		}
		if copied == nil {
			return v, false
		}
		return copied, true
	case map[string]any:
		var copied map[string]any
		for k, e := range v {
			if n, changed := r.value(e); changed {
				if copied == nil {
					copied = make(map[string]any, len(v))
					for k2, e2 := range v {
						copied[k2] = e2
					}
				}
				copied[k] = n
			}
		}
		if copied == nil {
			return v, false
		}
		return copied, true
	}
	return v, false
}

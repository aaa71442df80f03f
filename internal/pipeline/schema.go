package pipeline

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/toolgate/toolgate/internal/textutil"
)

// refusingLoader resolves no URL: schemas are self-contained, so neither the
// network nor the file system is ever reached through $ref.
type refusingLoader struct{}

func (refusingLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external $ref %q is not resolved", url)
}

var schemaSeq atomic.Uint64

// CompileSchema compiles a JSON Schema (2020-12 unless it says otherwise).
func CompileSchema(text string) (*jsonschema.Schema, error) {
	doc, err := ParseJSON(text)
	if err != nil {
		return nil, fmt.Errorf("schema is not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refusingLoader{})
	url := fmt.Sprintf("mem://toolgate/schema-%d.json", schemaSeq.Add(1))
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// schemaMessage is a bounded, single-line description of a validation
// error: the failing location and what failed there, naming the fields a
// schema requires or refuses, the types and the sizes, but never a value (a
// pattern, const or enum error would quote the offending value, which may be
// what a post-execute rule would have withheld).
func schemaMessage(err error) string {
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return "(the schema could not be applied)"
	}
	leaf := verr
	for len(leaf.Causes) > 0 {
		leaf = leaf.Causes[0]
	}
	loc := "/" + strings.Join(leaf.InstanceLocation, "/")
	return bounded(fmt.Sprintf("at %s: %s", loc, failure(leaf.ErrorKind)))
}

// failure says what a schema keyword found wrong, without the value.
func failure(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Required:
		return "missing required " + fieldList(k.Missing)
	case *kind.AdditionalProperties:
		return "unexpected " + fieldList(k.Properties) + " (the schema allows no other fields)"
	case *kind.Type:
		return fmt.Sprintf("is %s, the schema wants %s", k.Got, strings.Join(k.Want, " or "))
	case *kind.MinLength:
		return fmt.Sprintf("is %d characters long, at least %d wanted", k.Got, k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("is %d characters long, at most %d allowed", k.Got, k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("has %d items, at least %d wanted", k.Got, k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("has %d items, at most %d allowed", k.Got, k.Want)
	case *kind.MinProperties:
		return fmt.Sprintf("has %d fields, at least %d wanted", k.Got, k.Want)
	case *kind.MaxProperties:
		return fmt.Sprintf("has %d fields, at most %d allowed", k.Got, k.Want)
	}
	return "fails " + strings.Join(k.KeywordPath(), "/")
}

// fieldList names fields, quoted (a field the caller sent may hold any
// characters), at most five.
func fieldList(names []string) string {
	word := "field "
	if len(names) > 1 {
		word = "fields "
	}
	quoted := make([]string, 0, min(len(names), 5))
	for i, n := range names {
		if i == 5 {
			quoted = append(quoted, fmt.Sprintf("and %d more", len(names)-5))
			break
		}
		quoted = append(quoted, strconv.Quote(textutil.OneLine(n, 64)))
	}
	return word + strings.Join(quoted, ", ")
}

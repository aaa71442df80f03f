package pipeline

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/santhosh-tekuri/jsonschema/v6"
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
// error: the failing location and the keyword that failed, never a value
// (a pattern, const or enum error quotes the offending value, which may be
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
	return bounded(fmt.Sprintf("at %s: fails %s", loc, strings.Join(leaf.ErrorKind.KeywordPath(), "/")))
}

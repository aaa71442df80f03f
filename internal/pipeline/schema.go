package pipeline

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// refusingLoader resolves no URL: schemas are self-contained, so neither the
// network nor the file system is ever reached through $ref.
type refusingLoader struct{}

func (refusingLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external $ref %q is not resolved", url)
}

var (
	schemaSeq      atomic.Uint64
	englishPrinter = message.NewPrinter(language.English)
)

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

// schemaMessage is a bounded, single-line description of a validation error
// (it names the failing location and keyword, never the whole document).
func schemaMessage(err error) string {
	var verr *jsonschema.ValidationError
	msg := err.Error()
	if errors.As(err, &verr) {
		leaf := verr
		for len(leaf.Causes) > 0 {
			leaf = leaf.Causes[0]
		}
		loc := "/" + strings.Join(leaf.InstanceLocation, "/")
		msg = fmt.Sprintf("at %s: %s", loc, leaf.ErrorKind.LocalizedString(englishPrinter))
	}
	return bounded(msg)
}

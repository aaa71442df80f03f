package notify

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Formats of a sink's payload.
const (
	FormatCloudEvents = "cloudevents" // CloudEvents 1.0 JSON, structured mode
	FormatSlack       = "slack"       // a Slack incoming webhook's {"text", "blocks"}
	FormatTeams       = "teams"       // a Teams incoming webhook's message with an Adaptive Card
)

// Config is the install's notification sinks.
type Config struct {
	Sinks []Sink `json:"sinks"`
}

// Sink is one receiver of notifications.
type Sink struct {
	// Name is what a profile's approval.notify selects it by.
	Name string `json:"name"`
	// Format is cloudevents, slack or teams.
	Format string `json:"format"`
	// URL receives a POST per event (http or https).
	URL string `json:"url"`
	// Default sends it every profile's questions, named or not.
	Default bool `json:"default,omitempty"`
	// Namespaces, when set, are the only namespaces whose questions (and
	// audit records) it receives.
	Namespaces []string `json:"namespaces,omitempty"`
	// Audit sends it every audit record (docs/operations.md, Audit trail)
	// as a CloudEvent, beside the manager's audit log; cloudevents only.
	Audit bool `json:"audit,omitempty"`
}

// Load reads and checks a configuration file.
func Load(path string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	var c Config
	if err := yaml.UnmarshalStrict(raw, &c); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, c.Validate()
}

// Validate checks every sink: a unique DNS-label name, a known format, an
// absolute http(s) URL.
func (c Config) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, s := range c.Sinks {
		where := fmt.Sprintf("sinks[%d] (%s)", i, s.Name)
		if msgs := validation.IsDNS1123Label(s.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s: name: %v", where, msgs))
		}
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("%s: name used twice", where))
		}
		seen[s.Name] = true
		if !slices.Contains([]string{FormatCloudEvents, FormatSlack, FormatTeams}, s.Format) {
			errs = append(errs, fmt.Errorf("%s: format must be cloudevents, slack or teams, not %q", where, s.Format))
		}
		if s.Audit && s.Format != FormatCloudEvents {
			errs = append(errs, fmt.Errorf("%s: audit: only a cloudevents sink receives audit records", where))
		}
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("%s: url must be an absolute http or https URL", where))
		}
	}
	return errors.Join(errs...)
}

// HasAudit reports whether a sink receives audit records.
func (c Config) HasAudit() bool {
	return slices.ContainsFunc(c.Sinks, func(s Sink) bool { return s.Audit })
}

// auditFor are the sinks an audit record of namespace goes to.
func (c Config) auditFor(namespace string) []Sink {
	var out []Sink
	for _, s := range c.Sinks {
		if s.Audit && (len(s.Namespaces) == 0 || slices.Contains(s.Namespaces, namespace)) {
			out = append(out, s)
		}
	}
	return out
}

// For are the sinks an event of namespace goes to: the default ones and
// those named, that admit the namespace.
func (c Config) For(namespace string, named []string) []Sink {
	var out []Sink
	for _, s := range c.Sinks {
		if (s.Default || slices.Contains(named, s.Name)) && (len(s.Namespaces) == 0 || slices.Contains(s.Namespaces, namespace)) {
			out = append(out, s)
		}
	}
	return out
}

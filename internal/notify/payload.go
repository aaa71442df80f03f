package notify

import (
	"encoding/json"
	"strings"

	"github.com/toolgate/toolgate/internal/audit"
)

// cloudEventType names each event type in CloudEvents' reverse-DNS form.
var cloudEventType = map[string]string{
	TypeRequested: "dev.toolgate.approval.requested",
	TypeDecided:   "dev.toolgate.approval.decided",
	TypeExpired:   "dev.toolgate.approval.expired",
	TypeCancelled: "dev.toolgate.approval.cancelled",
}

const contentTypeCloudEvents = "application/cloudevents+json"

// auditPayload is the CloudEvent of an audit record: its id is the
// record's (stable, so a receiver drops a record written twice).
func auditPayload(r audit.Record) ([]byte, error) {
	r.Kind = audit.Kind
	subject := "toolcalls/" + r.Call
	return json.Marshal(map[string]any{
		"specversion":     "1.0",
		"id":              r.ID,
		"source":          "toolgate.dev/namespaces/" + r.Namespace,
		"type":            "dev.toolgate.audit." + r.Type,
		"subject":         subject,
		"time":            r.Time,
		"datacontenttype": "application/json",
		"data":            r,
	})
}

// payload is the body and content type of e for format.
func payload(format string, e Event) ([]byte, string, error) {
	switch format {
	case FormatCloudEvents:
		b, err := json.Marshal(map[string]any{
			"specversion":     "1.0",
			"id":              e.ID,
			"source":          "toolgate.dev/namespaces/" + e.Namespace,
			"type":            cloudEventType[e.Type],
			"subject":         "approvalrequests/" + e.Request,
			"time":            e.Time,
			"datacontenttype": "application/json",
			"data":            e,
		})
		return b, contentTypeCloudEvents, err
	case FormatSlack:
		text := e.summary() + "\n" + strings.Join(e.details(), "\n")
		b, err := json.Marshal(map[string]any{
			"text": slackEscape(text),
			"blocks": []any{
				map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": "*" + slackEscape(e.summary()) + "*"}},
				map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": slackEscape(strings.Join(e.details(), "\n"))}},
			},
		})
		return b, "application/json", err
	default: // FormatTeams
		body := []any{map[string]any{"type": "TextBlock", "text": teamsEscape(e.summary()), "weight": "Bolder", "wrap": true}}
		for _, d := range e.details() {
			body = append(body, map[string]any{"type": "TextBlock", "text": teamsEscape(d), "wrap": true})
		}
		b, err := json.Marshal(map[string]any{
			"type": "message",
			"attachments": []any{map[string]any{
				"contentType": "application/vnd.microsoft.card.adaptive",
				"content": map[string]any{
					"$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
					"type":    "AdaptiveCard", "version": "1.4", "body": body,
				},
			}},
		})
		return b, "application/json", err
	}
}

// slackEscape keeps text from being read as Slack markup (links,
// mentions): the three characters Slack asks to escape.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// teamsEscape keeps an Adaptive Card's Markdown from making a labelled
// link ([text](url)) out of text an agent chose: a URL shows as itself.
func teamsEscape(s string) string { return strings.ReplaceAll(s, "](", "] (") }

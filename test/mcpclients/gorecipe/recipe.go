// Package gorecipe is docs/mcp.md's Go recipe: go-sdk's MCP client running
// one model turn of two calls through toolgate.
package gorecipe

import (
	"context"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// withToken sets the bearer token on every request of the MCP transport.
type withToken struct{ token string }

func (t withToken) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return http.DefaultTransport.RoundTrip(r)
}

// Turn lists the session's tools and runs one model turn of two calls,
// returning what the model reads of each. endpoint is
// https://GATEWAY/mcp/NAMESPACE/SESSION, token a ServiceAccount token for
// the gateway's audience, turn the session's status.currentTurn + 1.
func Turn(ctx context.Context, endpoint, token string, turn int64) (tools []string, results []string, err error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "my-agent", Version: "v1"}, nil)
	session, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   endpoint,
		HTTPClient: &http.Client{Transport: withToken{token}},
	}, nil)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = session.Close() }()

	listed, err := session.ListTools(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	for _, t := range listed.Tools {
		tools = append(tools, t.Name)
	}

	// The model's turn: _meta places each call; they run in parallel where
	// the profile allows and commit in this order.
	calls := []map[string]any{{"text": "a"}, {"text": "b"}}
	type answer struct {
		text string
		err  error
	}
	answers := make([]chan answer, len(calls))
	for i, args := range calls {
		answers[i] = make(chan answer, 1)
		go func() {
			res, err := session.CallTool(ctx, &mcp.CallToolParams{
				Name:      "echo",
				Arguments: args,
				Meta:      mcp.Meta{"toolgate.dev/turn": turn, "toolgate.dev/index": i, "toolgate.dev/turnSize": len(calls)},
			})
			if err != nil {
				answers[i] <- answer{err: err} // a protocol or transport failure, never a denial
				return
			}
			var text []string
			for _, c := range res.Content {
				if t, ok := c.(*mcp.TextContent); ok {
					text = append(text, t.Text)
				}
			}
			// A denial or a failure has IsError, its first text "CODE: message".
			prefix := "result: "
			if res.IsError {
				prefix = "error: "
			}
			answers[i] <- answer{text: prefix + strings.Join(text, " ")}
		}()
	}
	for _, a := range answers {
		got := <-a
		if got.err != nil {
			return tools, results, got.err
		}
		results = append(results, got.text)
	}
	return tools, results, nil
}

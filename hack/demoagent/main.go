// Command demoagent is the demo's agent: a scripted model that makes two
// turns of tool calls in its AgentSession through pkg/agent, as the identity
// of its kubeconfig, and prints each result as it commits, in model order,
// then the contexts the session released for the model's next step.
//
// hack/demo.sh runs it as demo-agent; while turn 0 waits for a person, the
// script approves the write as demo-approver.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/textutil"
	"github.com/toolgate/toolgate/pkg/agent"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "the agent's kubeconfig")
	namespace := flag.String("namespace", "demo", "the session's namespace")
	session := flag.String("session", "demo", "the AgentSession to open (created when missing)")
	profile := flag.String("profile", "workspace-tools", "the ToolProfile of a session created")
	claim := flag.String("claim", "demo-workspace", "the existing workspace claim of a session created")
	timeout := flag.Duration("timeout", 5*time.Minute, "how long the whole run may take")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *kubeconfig, *namespace, *session, *profile, *claim); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

// turns is the scripted model: each turn's calls, in the model's order.
var turns = [][]agent.Call{
	{
		{CallID: "call_write", Tool: "write_file", Arguments: json.RawMessage(`{"path":"notes.md","content":"toolgate ran this write after a person approved it"}`)},
		{CallID: "call_list", Tool: "list_files", Arguments: json.RawMessage(`{"path":""}`)},
	},
	{
		{CallID: "call_read", Tool: "read_file", Arguments: json.RawMessage(`{"path":"notes.md"}`)},
		{CallID: "call_count", Tool: "word_count", Arguments: json.RawMessage(`{"text":"how many words are in this sentence"}`)},
		{CallID: "call_list2", Tool: "list_files", Arguments: json.RawMessage(`{"path":""}`)},
		{CallID: "call_secret", Tool: "read_file", Arguments: json.RawMessage(`{"path":".ssh/id_rsa"}`)},
	},
}

func run(ctx context.Context, kubeconfig, namespace, name, profile, claim string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	// doc:begin (docs/agents.md quotes this part; a test keeps them equal)
	c, err := agent.New(ctx, cfg)
	if err != nil {
		return err
	}
	session, err := c.Open(ctx, namespace, name, agent.SessionOptions{
		Profile:     profile,
		MaxParallel: 4,
		Workspace:   &toolgatev1alpha1.WorkspaceSpec{ExistingClaim: claim},
	})
	if err != nil {
		return err
	}
	for _, calls := range turns {
		turn, err := session.Submit(ctx, calls)
		if err != nil {
			return err
		}
		fmt.Printf("agent: turn %d submitted as %s: %v\n", turn.Number, c.User(), turn.Names)
		// Results arrive in model order, each once it and every call
		// before it are final.
		for r, err := range turn.Results(ctx) {
			if err != nil {
				return err
			}
			printResult(r)
		}
		// The contexts the turn deferred to the model's next step,
		// released once every call of the turn committed.
		contexts, err := turn.Contexts(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("agent: turn %d committed; contexts for the next step: %d\n", turn.Number, len(contexts))
	}
	// doc:end
	return nil
}

func printResult(r agent.Result) {
	seq := "-"
	if r.CommitSequence != nil {
		seq = fmt.Sprint(*r.CommitSequence)
	}
	detail := r.Content
	if r.Outcome != toolgatev1alpha1.OutcomeSucceeded {
		detail = r.ErrorCode + ": " + r.Message
	}
	fmt.Printf("agent:   [%d] %-10s seq=%s %-9s %s\n", r.Index, r.Tool, seq, r.Outcome, textutil.OneLine(detail, 70))
}

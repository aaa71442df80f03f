package pipeline

import (
	"context"
	"fmt"

	"github.com/toolgate/toolgate/internal/textutil"
)

// The stages after the body: post-execute decides on a successful result,
// finalize makes the one result (the finalizer having the last word on its
// content), observe shows it to the observers before it is durable.

// postExecute lets listeners, in order, accept (replacing content XOR value,
// attaching contexts) or block a successful result.
func (p *Pipeline) postExecute(ctx context.Context, st *State, snap snapshot) {
	call := st.call()
	now := p.opts.Clock.Now()
	acted := ""
	for _, l := range snap.post {
		d, ok := safePost(l.fn, call, PostInput{Value: st.Body.Value, Content: st.Body.Content})
		if !ok || d.Err != nil {
			st.record(StagePostExecute, VerdictError, l.name, now)
			st.Body = nil
			msg := "the post-execute listener " + l.name + " failed"
			if ok {
				msg += ": " + bounded(d.Err.Error())
			}
			st.settle(CodePostFailed, msg)
			return
		}
		contexts := policyContexts(l.name, d.Contexts)
		if d.Block {
			st.record(StagePostExecute, VerdictBlock, l.name, now)
			st.Body, st.Decisions = nil, contexts
			st.settle(CodePostBlocked, orDefault(d.Message, "blocked by "+l.name))
			return
		}
		if d.ReplaceContent != nil && d.ReplaceValue != nil {
			st.record(StagePostExecute, VerdictError, l.name, now)
			st.Body = nil
			st.settle(CodePostFailed, "the post-execute listener "+l.name+" replaced both content and value")
			return
		}
		if d.ReplaceContent != nil {
			st.Body.Content = *d.ReplaceContent
			acted = l.name
		}
		if d.ReplaceValue != nil {
			canon, content, f := p.validateAndRender(snap.tool, call.Args, d.ReplaceValue, CodePostFailed)
			if f != nil {
				st.record(StagePostExecute, VerdictError, l.name, now)
				st.Body = nil
				st.settle(f.Code, "the replaced value was refused: "+f.Message)
				return
			}
			st.Body.Value, st.Body.Content = canon, content
			acted = l.name
		}
		if len(contexts) > 0 {
			st.Decisions, _ = boundContexts(nil, append(st.Decisions, contexts...))
			acted = l.name
		}
	}
	if ctx.Err() != nil {
		st.record(StagePostExecute, VerdictCancelled, string(CodeCancelled), now)
		st.Body, st.Decisions = nil, nil
		st.settle(CodeCancelled, cancelledBecause(ctx, "the call was cancelled before its result settled"))
		return
	}
	st.record(StagePostExecute, VerdictAccept, acted, now)
	st.Next = StageFinalize
}

func policyContexts(rule string, msgs []string) []Context {
	if len(msgs) == 0 {
		return nil
	}
	out := make([]Context, len(msgs))
	for i, m := range msgs {
		out[i] = Context{Source: SourcePolicy, Rule: rule, Message: m}
	}
	return out
}

func safePost(fn PostListener, call Call, in PostInput) (d PostDecision, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return fn(call, in), true
}

// finalize normalizes the state into the one Result, then gives the
// definition's FinalizeContent the last, content-only word.
func (p *Pipeline) finalize(st *State, snap snapshot) {
	r := st.Request
	res := &Result{Token: st.Token, CallID: r.CallID, Tool: r.Tool}
	if f := st.Failure; f != nil {
		res.Outcome, res.Code, res.Message = OutcomeOf(f.Code), f.Code, f.Message
		res.Content = failureContent(f)
		if f.Code == CodePostBlocked {
			// A block keeps only the blocking policy's contexts.
			res.Contexts, _ = boundContexts(nil, st.Decisions)
		}
	} else if st.Body != nil && snap.tool == nil {
		// The definition whose finalizer has the last word on this output
		// is gone: nothing of the output reaches the model.
		f := &Failure{Code: CodeUnknownTool, Message: fmt.Sprintf("tool %q was removed before its result was finalized", r.Tool)}
		res.Outcome, res.Code, res.Message, res.Content = OutcomeOf(f.Code), f.Code, f.Message, failureContent(f)
	} else if st.Body != nil {
		res.Outcome, res.Value, res.Content, res.Truncated = Succeeded, st.Body.Value, st.Body.Content, st.Body.Truncated
		// Tool-deferred contexts precede decision contexts; the rules'
		// have room first (boundContexts).
		var cut bool
		res.Contexts, cut = boundContexts(st.Body.Contexts, st.Decisions)
		res.Truncated = res.Truncated || cut
	} else {
		res.Outcome, res.Code, res.Message = Failed, CodeInternal, "no body output and no failure"
		res.Content = failureContent(&Failure{Code: CodeInternal, Message: res.Message})
	}
	if r.Parent != "" {
		// Nested calls carry no additional contexts.
		res.Contexts = nil
	}
	// Bounded before the finalizer, which has the last word: what it
	// returns is the content, unless it is more than a result holds.
	content, cut := boundContent(res.Value, res.Content, res.Contexts)
	res.Content, res.Truncated = content, res.Truncated || cut
	verdict := VerdictOK
	if snap.tool != nil && snap.tool.def.FinalizeContent != nil {
		content, ok := safeFinalize(snap.tool.def.FinalizeContent, res)
		why := "FinalizeContent panicked"
		if ok {
			content = textutil.Text(content)
			if _, over := boundContent(res.Value, content, res.Contexts); over {
				ok, why = false, fmt.Sprintf("FinalizeContent returned %d bytes of content as stored; with the value and contexts a result holds at most %d", encodedLen(content), MaxResultBytes)
			}
		}
		if ok {
			res.Content = content
		} else {
			// A failure like any other: its content is the failure content,
			// and it carries no value, no contexts and no cut flag.
			f := &Failure{Code: CodeNormalizationFailed, Message: why}
			res.Outcome, res.Code, res.Message = Failed, f.Code, f.Message
			res.Content, res.Value, res.Contexts, res.Truncated = failureContent(f), "", nil, false
			verdict = VerdictError
		}
	}
	st.record(StageFinalize, verdict, string(res.Code), p.opts.Clock.Now())
	st.Result = res
	st.Next = StageObserve
}

func safeFinalize(fn func(string, ResultView) string, res *Result) (s string, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	frozen := *res
	frozen.Contexts = append([]Context(nil), res.Contexts...)
	return fn(res.Content, ResultView{&frozen}), true
}

// failureContent is what the model reads for a failure: the stable code and
// the message.
func failureContent(f *Failure) string {
	if f.Message == "" {
		return "error: " + string(f.Code)
	}
	return "error: " + string(f.Code) + ": " + f.Message
}

// observe hands the frozen outcome to observers; they cannot change it, and
// a failing observer affects nothing.
func (p *Pipeline) observe(st *State, snap snapshot) {
	if len(snap.observers) > 0 {
		frozen := *st.Result
		frozen.Contexts = append([]Context(nil), st.Result.Contexts...)
		for _, o := range snap.observers {
			safeObserve(o.fn, ResultView{&frozen})
		}
	}
	st.record(StageObserve, VerdictOK, "", p.opts.Clock.Now())
	st.Next = StageResult
}

func safeObserve(fn Observer, v ResultView) {
	defer func() { _ = recover() }()
	fn(v)
}

// Package pipeline is toolgate's tool execution pipeline as a pure Go
// library: no Kubernetes types, one rule set, two drivers (the in-memory
// drivers here, and the controllers, which persist each boundary in
// ToolCall.status).
//
// How the specification's requirements (quoted) map to the code;
// docs/pipeline.md records the decisions it leaves open:
//
//   - "Register a typed tool at the tools boundary": Definition (name,
//     description, parameters, mandatory Output{Schema, Render}, Execute,
//     optional IsConcurrencySafe and FinalizeContent) and Registry.Register,
//     which compiles both schemas (JSON Schema 2020-12, no network or file
//     $ref) and refuses a definition without an output declaration.
//   - Lifecycle ("disposal removes registrations with their owning scope"):
//     every Registry method takes an internal/lifecycle Scope; disposing it
//     removes the registration (TestDisposingAScopeRemovesItsRegistrations).
//   - "Follow the exact pipeline in order": the stages of State.Next, in
//     order — StageCall (admit: visible tool, lossless arguments matching the
//     schema, opaque token), StagePreExecute, StageApproval (only for ask),
//     StageGuard, StageDispatch + StageExecute (wrappers around the body),
//     StagePostExecute, StageFinalize (normalize, then FinalizeContent),
//     StageObserve (live tools/result), StageResult (durable tool/result).
//     Pipeline.Step runs exactly one stage and appends one Record.
//   - "Keep guard, approval, and sandbox responsibilities distinct":
//     PreListener (ordered by an order key, reorderable, allow/deny/ask,
//     first decision wins, default deny); Approver (AllowedOnce continues;
//     Rejected, ApprovalAborted, Unavailable, no approver, a panic or a passed
//     deadline fail closed); Guard (deny or abstain, a panic denies, nothing
//     later can override); the sandbox is the body's provider.
//   - "Preserve one call and one result": every failure becomes a Failure
//     with a stable Code (codes.go) and the State skips to StageFinalize;
//     Resume returns exactly one Result; a body cannot claim a pipeline
//     decision as its code (ownCode).
//   - "Understand which stage may rewrite what": Call is passed by value and
//     its Arguments hand out fresh copies only; a Wrapper can substitute only
//     the context passed to Next, and the caller's cancellation is re-fused
//     before the body (fuse); the body's own outcome is the result, and a
//     wrapper returning anything else fails the call (wrapperFailure);
//     post-execute accepts replace content XOR value
//     (a new value is validated and rendered again) or block (a valueless
//     failure keeping only the blocking listener's contexts);
//     FinalizeContent is content-only; observers get a ResultView.
//   - "Classify concurrency per call and commit in model order":
//     Pipeline.Classify (only the exact value true is Parallel) and
//     Pipeline.RunTurn (exclusive calls are barriers, a rolling pool of
//     MaxParallel, reclassification immediately before start, pre-execute,
//     post-execute and commitment in model order, contexts released after
//     the whole turn commits).
//   - "Handle cancellation and deferred context": cancellation before
//     dispatch skips every remaining stage (cancelledBeforeDispatch), and so
//     does one arriving before the body was entered (execute); after
//     invocation it replaces only a success, and against the timeout the
//     first of the two wins; Exec.DeferContext queues
//     tool contexts, which precede decision contexts on accept and are
//     dropped on failure or block; nested calls (Request.Parent) carry none.
//
// Crash safety. A driver persists the State after every Advanced step, so
// each boundary is durable before the side effect that follows it. Which
// transitions may repeat after a crash:
//
//   - call, pre-execute, guard, post-execute, finalize: pure given the
//     registry and the state; repeating them is harmless.
//   - approval: asks again; Approver.Approve must be idempotent per token
//     (the API server provider gets-or-creates one ApprovalRequest).
//   - dispatch: records a new attempt; harmless.
//   - execute: the body. Resumed after the dispatch boundary, an attempt may
//     already have run: a Reattach body is re-invoked with Exec.Resumed (it
//     re-attaches, e.g. to the pod it started), an Idempotent
//     body is dispatched again (up to max(MaxAttempts, 3) attempts in all),
//     and any other body is never run again — the call settles as
//     CodeInterrupted. Retries likewise re-run only
//     idempotent bodies, each attempt behind its own dispatch boundary.
//   - observe: observers are live and may see a result again after a crash
//     (at least once); the durable result is written once, at StageResult.
package pipeline

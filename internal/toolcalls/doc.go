// Package toolcalls is what toolgate knows of ToolCalls apart from
// reconciling them, in one place, for the reconcilers to read and write
// through (the way a scheduler keeps its workload predicates beside, not
// inside, its controllers):
//
//   - predicates.go: what is true of one call (Deleting, NestedIn,
//     HeldExecute, AskedApproval);
//   - state.go: a call's pipeline state in its status, both ways
//     (StateOf, WriteState), its phase and conditions, and the frozen
//     failure written before a failure is announced (FrozenOf);
//   - plan.go: a session's plan (Planner, PlanSession, SessionPlan: who
//     is admitted, released, refused, and whom to wake, NextOf);
//   - screen.go: which calls have a place in the log (screen, OutOfLog);
//   - sessionstatus.go: the session's log head, derived from its calls
//     (SetSessionStatus, CompleteThrough);
//   - index.go: a session's calls read in place from the cache (Index);
//   - ownwrites.go: this process's own writes of calls, where the cache is
//     behind them (OwnWrites).
//
// Nothing here writes to the API server or reads a sandbox provider.
package toolcalls

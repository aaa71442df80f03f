// Package approval is the approval seam's contract: a Provider answers one
// human question about one call. Providers: apiserver (an ApprovalRequest a
// person decides with kubectl) and none (every question fails closed).
// Consumers use this package only, never a provider package.
package approval

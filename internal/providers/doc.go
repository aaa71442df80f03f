// Package providers holds toolgate's capability seams. Each seam is a
// subpackage that defines a contract (the Definition); its own subpackages
// supply that contract for one substrate (the Providers). The controllers
// call the contract (the Consumers) and never import a provider; they hand
// the pipeline only its own interfaces over it (pipeline.Runner,
// pipeline.Approver), so the pipeline imports nothing of this tree. Only
// the code that builds a manager (the composition) names a concrete
// provider: it chooses and mounts them.
//
// Seams: sandbox (providers: pod, process) and approval (providers:
// apiserver, none).
package providers

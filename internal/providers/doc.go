// Package providers holds toolgate's capability seams. Each seam is a
// subpackage that defines a contract (the Definition); its own subpackages
// supply that contract for one substrate (the Providers); controllers and the
// pipeline call the contract (the Consumers) and never import a provider.
// cmd/ composes: it chooses and mounts the providers.
//
// Seams: sandbox (providers: pod, process) and approval (providers:
// apiserver, none).
package providers

// Package apicontract proves toolgate's API contract on a real kube-apiserver:
// invalid objects are rejected with messages that name the field, samples are
// accepted, immutability and set-once rules hold on update, and the OpenAPI
// schema (kubectl explain) is published.
package apicontract

// Package textutil bounds text for status fields, labels and messages: one
// UTF-8-safe way to cut a string, so no field ever holds half a character
// and no label value ends in a character the API server refuses. It imports
// only the standard library.
package textutil

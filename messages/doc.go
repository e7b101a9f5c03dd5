// Package messages is the vocabulary actorlb's actors speak: one immutable
// request struct and one typed reply (with an Err field) per operation,
// grouped by the actor that owns the operation.
//
// Lifecycle: a message is immutable once sent; senders copy slices and maps
// before sending.
//
// Error contract: failures travel in a reply's Err field, never as a bare
// error value in place of the reply.
package messages

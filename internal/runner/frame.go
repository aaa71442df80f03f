package runner

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// FramePrefix starts the frame's clear line. The rest of the frame is
// sealed: whoever sees it on the way (the network, a recording) sees sizes,
// never the tool's output or contexts.
const FramePrefix = "TOOLGATE-FRAME/2 "

// Header describes a frame's payload: Stdout bytes, then Stderr bytes.
type Header struct {
	ExitCode    int    `json:"exitCode"`
	Signal      string `json:"signal,omitempty"`
	StdoutBytes int    `json:"stdoutBytes"`
	StderrBytes int    `json:"stderrBytes"`
	Truncated   bool   `json:"truncated,omitempty"`
	// Error is the runner's own failure (the tool could not start, a
	// built-in's stable code); empty when the tool ran.
	Error string `json:"error,omitempty"`
	// Code is a stable code (internal/codes) for Error; the providers turn
	// it into the pipeline failure.
	Code string `json:"code,omitempty"`
	// Contexts are the messages the tool deferred for the model (one line
	// each of the file named by TOOLGATE_CONTEXTS_FILE), bounded.
	Contexts []string `json:"contexts,omitempty"`
	// BodyMillis is how long the body ran, measured by the runner from the
	// moment it started the body: the tool's timeout is judged by it, never
	// by when a manager next looked.
	BodyMillis int64 `json:"bodyMillis,omitempty"`
	// BodyStartedUnixMicros is when the body started, by the pod's clock
	// (the node's), and BodyMicros how long it ran: the body's span in the
	// call's trace.
	BodyStartedUnixMicros int64 `json:"bodyStartedUnixMicros,omitempty"`
	BodyMicros            int64 `json:"bodyMicros,omitempty"`
	// ConnectedUnixMicros is when the runner accepted the connection that
	// handed the call over, and HandedUnixMicros when it had opened the
	// request (its clock): the hand-over's share of the manager (up to
	// the connection), of the channel (the greeting and the request) and
	// of the runner (up to the body's start), in the call's trace.
	ConnectedUnixMicros int64 `json:"connectedUnixMicros,omitempty"`
	HandedUnixMicros    int64 `json:"handedUnixMicros,omitempty"`
	// Refused names the requests an MCP server made of its client that
	// the runner refused (sampling, elicitation, roots: their methods,
	// bounded), for the call's trace.
	Refused []string `json:"refused,omitempty"`
}

// Result is a verified frame.
type Result struct {
	Header
	Stdout []byte
	Stderr []byte
}

// clear is the frame's clear line: how many sealed bytes follow, and the
// nonce they were sealed with.
type clear struct {
	Sealed int    `json:"sealed"`
	Nonce  string `json:"nonce"`
}

// aead derives a cipher (AES-256-GCM) from key for one use (label): a
// frame and a handover request never open under each other's key.
func aead(label string, key []byte) (cipher.AEAD, error) {
	sum := sha256.Sum256(append([]byte(label+"\x00"), key...))
	block, err := aes.NewCipher(sum[:])
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// WriteFrame writes one sealed frame: the header and payload encrypted and
// authenticated under key (and bound to the clear line).
func WriteFrame(w io.Writer, key []byte, h Header, stdout, stderr []byte) error {
	h.StdoutBytes, h.StderrBytes = len(stdout), len(stderr)
	head, err := json.Marshal(h)
	if err != nil {
		return err
	}
	plain := make([]byte, 0, len(head)+1+len(stdout)+len(stderr))
	plain = append(append(append(append(plain, head...), '\n'), stdout...), stderr...)
	return writeSealed(w, FramePrefix, frameLabel, key, plain)
}

const (
	frameLabel   = "toolgate-frame/2"
	requestLabel = "toolgate-request/1"
)

// writeSealed writes prefix, a clear line (size and nonce) and plain
// sealed under key for label, bound to the clear line.
func writeSealed(w io.Writer, prefix, label string, key, plain []byte) error {
	c, err := aead(label, key)
	if err != nil {
		return err
	}
	nonce := make([]byte, c.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	line, err := json.Marshal(clear{Sealed: len(plain) + c.Overhead(), Nonce: hex.EncodeToString(nonce)})
	if err != nil {
		return err
	}
	var b bytes.Buffer
	b.WriteString(prefix)
	b.Write(line)
	b.WriteByte('\n')
	b.Write(c.Seal(nil, nonce, plain, line))
	_, err = w.Write(b.Bytes())
	return err
}

// MaxFrameBytes bounds a sealed frame: the largest output (8 MiB), stderr,
// contexts and the header fit well within it.
const MaxFrameBytes = 16 << 20

// Errors of ReadFrame.
var (
	ErrNoFrame    = errors.New("runner: no frame in the log")
	ErrIncomplete = errors.New("runner: the frame is incomplete")
	ErrForged     = errors.New("runner: the frame does not verify")
)

// ReadFrame finds the frame in a stream (a recorded answer of a runner) and
// opens it with key. Anything before the frame is ignored; a frame that
// does not open (altered, forged, truncated) is an error, never a result.
// Exchange opens the frame of a live connection itself (openFrame).
func ReadFrame(log io.Reader, key []byte) (*Result, error) {
	r := bufio.NewReaderSize(log, 64<<10)
	for {
		line, err := r.ReadString('\n')
		if strings.HasPrefix(line, FramePrefix) && strings.HasSuffix(line, "\n") {
			return openFrame(r, key, strings.TrimSuffix(strings.TrimPrefix(line, FramePrefix), "\n"))
		}
		if err == io.EOF {
			return nil, ErrNoFrame
		}
		if err != nil {
			return nil, err
		}
	}
}

func openFrame(r io.Reader, key []byte, line string) (*Result, error) {
	plain, err := readSealed(r, frameLabel, key, line, MaxFrameBytes)
	if err != nil {
		return nil, err
	}
	head, payload, ok := bytes.Cut(plain, []byte{'\n'})
	var h Header
	if !ok || json.Unmarshal(head, &h) != nil || h.StdoutBytes < 0 || h.StderrBytes < 0 || h.StdoutBytes+h.StderrBytes != len(payload) {
		return nil, ErrForged
	}
	return &Result{Header: h, Stdout: payload[:h.StdoutBytes], Stderr: payload[h.StdoutBytes:]}, nil
}

// readSealed reads the sealed bytes announced by a clear line (at most
// limit) and opens them under key for label.
func readSealed(r io.Reader, label string, key []byte, line string, limit int) ([]byte, error) {
	var cl clear
	if err := json.Unmarshal([]byte(line), &cl); err != nil {
		return nil, fmt.Errorf("%w: clear line: %v", ErrForged, err)
	}
	c, err := aead(label, key)
	if err != nil {
		return nil, err
	}
	nonce, err := hex.DecodeString(cl.Nonce)
	if err != nil || len(nonce) != c.NonceSize() || cl.Sealed < c.Overhead() {
		return nil, ErrForged
	}
	if cl.Sealed > limit {
		return nil, ErrForged // never allocate what the clear line claims before it is authenticated
	}
	sealed := make([]byte, cl.Sealed)
	if _, err := io.ReadFull(r, sealed); err != nil {
		return nil, ErrIncomplete
	}
	plain, err := c.Open(nil, nonce, sealed, []byte(line))
	if err != nil {
		return nil, ErrForged
	}
	return plain, nil
}

package runner

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// FramePrefix starts the frame's header line in the container log.
const FramePrefix = "TOOLGATE-FRAME/1 "

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
	SHA256   string   `json:"sha256"`
	MAC      string   `json:"mac,omitempty"`
}

// Result is a verified frame.
type Result struct {
	Header
	Stdout []byte
	Stderr []byte
}

// mac authenticates the header (without its MAC) and the payload digest.
func mac(key []byte, h Header) string {
	h.MAC = ""
	data, _ := json.Marshal(h)
	m := hmac.New(sha256.New, key)
	m.Write(data)
	return hex.EncodeToString(m.Sum(nil))
}

// WriteFrame writes one authenticated frame.
func WriteFrame(w io.Writer, key []byte, h Header, stdout, stderr []byte) error {
	sum := sha256.New()
	sum.Write(stdout)
	sum.Write(stderr)
	h.StdoutBytes, h.StderrBytes = len(stdout), len(stderr)
	h.SHA256 = hex.EncodeToString(sum.Sum(nil))
	h.MAC = mac(key, h)
	line, err := json.Marshal(h)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	b.WriteString(FramePrefix)
	b.Write(line)
	b.WriteByte('\n')
	b.Write(stdout)
	b.Write(stderr)
	_, err = w.Write(b.Bytes())
	return err
}

// Errors of ReadFrame.
var (
	ErrNoFrame    = errors.New("runner: no frame in the log")
	ErrIncomplete = errors.New("runner: the frame is incomplete")
	ErrForged     = errors.New("runner: the frame does not verify")
)

// ReadFrame finds the frame in a container log and verifies it with key.
// Anything before the frame is ignored; a log holding a frame that does not
// verify (altered, forged, truncated) is an error, never a result.
func ReadFrame(log io.Reader, key []byte) (*Result, error) {
	r := bufio.NewReaderSize(log, 64<<10)
	for {
		line, err := r.ReadString('\n')
		if strings.HasPrefix(line, FramePrefix) && strings.HasSuffix(line, "\n") {
			return readPayload(r, key, strings.TrimSuffix(strings.TrimPrefix(line, FramePrefix), "\n"))
		}
		if err == io.EOF {
			return nil, ErrNoFrame
		}
		if err != nil {
			return nil, err
		}
	}
}

func readPayload(r io.Reader, key []byte, headerLine string) (*Result, error) {
	var h Header
	if err := json.Unmarshal([]byte(headerLine), &h); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrForged, err)
	}
	if h.StdoutBytes < 0 || h.StderrBytes < 0 {
		return nil, ErrForged
	}
	if !hmac.Equal([]byte(mac(key, h)), []byte(h.MAC)) {
		return nil, ErrForged
	}
	payload := make([]byte, h.StdoutBytes+h.StderrBytes)
	if _, err := io.ReadFull(r, payload); err != nil {
		return nil, ErrIncomplete
	}
	sum := sha256.Sum256(payload)
	if hex.EncodeToString(sum[:]) != h.SHA256 {
		return nil, ErrForged
	}
	return &Result{Header: h, Stdout: payload[:h.StdoutBytes], Stderr: payload[h.StdoutBytes:]}, nil
}

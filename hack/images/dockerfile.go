package main

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// The Dockerfile is the definition of toolgate's images; this file reads
// the part of its language that the Dockerfile uses and refuses the rest,
// naming the line, so that what is built here is what `docker build` builds.
//
//   - One build stage, FROM golang:VERSION AS NAME, holding ARG (with a
//     default), WORKDIR, COPY of sources (the checkout holds them) and RUN.
//     A RUN is split at `&&`; each command may start with VAR=value
//     assignments and must be `go build FLAGS -o /ABS/NAME PKG` or
//     `go mod download`. $VAR and ${VAR} are the stage's ARG values.
//   - Stages FROM scratch AS NAME, holding COPY --from=BUILD SRC DST (SRC a
//     go build's -o), USER and ENTRYPOINT in JSON form.

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line int    // its first line
	cmd  string // the keyword, upper case
	args string
}

// command is one command of a build stage's RUN.
type command struct {
	line int
	env  []string // its leading VAR=value assignments
	argv []string
	out  string // go build's -o (a path in the build stage)
	oArg int    // the index in argv of the word holding -o's value
}

// copyFile is a scratch stage's COPY --from of one built file.
type copyFile struct {
	line     int
	src, dst string
}

// stage is a FROM scratch stage: an image.
type stage struct {
	name       string
	line       int
	copies     []copyFile
	user       string
	entrypoint []string
}

// plan is what the Dockerfile builds.
type plan struct {
	goImage    string // the build stage's base, golang:VERSION
	buildStage string
	os, arch   string // TARGETOS and TARGETARCH of the build stage
	commands   []command
	stages     []stage
}

// goVersion is the Go release of the build stage's image ("go1.26.8"),
// from its tag.
func (p *plan) goVersion() string {
	tag := p.goImage[strings.LastIndex(p.goImage, ":")+1:]
	if i := strings.IndexAny(tag, "-@"); i >= 0 {
		tag = tag[:i]
	}
	return "go" + tag
}

func lineErr(line int, format string, a ...any) error {
	return fmt.Errorf("line %d: %s", line, fmt.Sprintf(format, a...))
}

// lex splits a Dockerfile into instructions: comments and blank lines
// dropped, a line ending in a backslash joined with the next (comment and
// blank lines within a continuation dropped, as BuildKit does).
func lex(src string) ([]instruction, error) {
	var out []instruction
	lines := strings.Split(src, "\n")
	directives := true
	for i := 0; i < len(lines); i++ {
		l := strings.TrimRight(lines[i], " \t\r")
		t := strings.TrimLeft(l, " \t")
		if strings.HasPrefix(t, "#") {
			if directives {
				if m := directive.FindStringSubmatch(t); m != nil && strings.EqualFold(m[1], "escape") && m[2] != `\` {
					return nil, lineErr(i+1, "escape directive %q is not followed", m[2])
				}
			}
			continue
		}
		directives = false
		if t == "" {
			continue
		}
		start := i + 1
		for strings.HasSuffix(t, `\`) {
			t = strings.TrimSuffix(t, `\`)
			i++
			for i < len(lines) {
				n := strings.TrimLeft(strings.TrimRight(lines[i], " \t\r"), " \t")
				if n != "" && !strings.HasPrefix(n, "#") {
					break
				}
				i++
			}
			if i == len(lines) {
				return nil, lineErr(start, "a continuation ends the file")
			}
			t += strings.TrimRight(lines[i], " \t\r")
		}
		cmd, args := t, ""
		if j := strings.IndexAny(t, " \t"); j >= 0 {
			cmd, args = t[:j], t[j+1:]
		}
		out = append(out, instruction{line: start, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
	}
	return out, nil
}

var (
	directive = regexp.MustCompile(`^#\s*(\w+)\s*=\s*(.*)$`)
	varName   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// goValueFlags are go build's flags that take a value as the next word.
	goValueFlags = map[string]bool{
		"o": true, "p": true, "ldflags": true, "gcflags": true, "asmflags": true, "gccgoflags": true,
		"tags": true, "mod": true, "modfile": true, "overlay": true, "pgo": true, "pkgdir": true,
		"toolexec": true, "installsuffix": true, "buildmode": true, "compiler": true,
		"coverpkg": true, "covermode": true, "exec": true,
	}
)

// parseDockerfile reads a Dockerfile into a plan.
func parseDockerfile(src string) (*plan, error) {
	ins, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &plan{}
	global := map[string]string{} // ARGs before the first FROM
	var (
		cur      *stage // the scratch stage being read
		inBuild  bool   // reading the build stage
		vars     map[string]string
		seenFrom bool
	)
	for _, in := range ins {
		if in.cmd == "FROM" {
			seenFrom = true
			cur, inBuild = nil, false
			f := strings.Fields(in.args)
			if len(f) != 3 || !strings.EqualFold(f[1], "AS") {
				return nil, lineErr(in.line, "FROM %s: want FROM IMAGE AS NAME", in.args)
			}
			base, name := f[0], strings.ToLower(f[2])
			if strings.ContainsAny(in.args, "$") || strings.HasPrefix(base, "-") {
				return nil, lineErr(in.line, "FROM %s: flags and variables are not followed", in.args)
			}
			for _, s := range p.stages {
				if s.name == name {
					return nil, lineErr(in.line, "stage %s is defined twice", name)
				}
			}
			switch {
			case base == "scratch":
				if name == p.buildStage {
					return nil, lineErr(in.line, "stage %s is defined twice", name)
				}
				p.stages = append(p.stages, stage{name: name, line: in.line})
				cur = &p.stages[len(p.stages)-1]
			case strings.HasPrefix(base, "golang:"):
				if p.buildStage != "" {
					return nil, lineErr(in.line, "a second build stage (%s after %s) is not followed", name, p.buildStage)
				}
				p.goImage, p.buildStage, inBuild = base, name, true
				vars = map[string]string{}
			default:
				return nil, lineErr(in.line, "FROM %s: only golang:VERSION (the build stage) and scratch are followed", base)
			}
			continue
		}
		switch {
		case !seenFrom:
			if in.cmd != "ARG" {
				return nil, lineErr(in.line, "%s before FROM is not followed", in.cmd)
			}
			k, v, ok := strings.Cut(in.args, "=")
			if !varName.MatchString(k) || strings.ContainsAny(v, " \t\"'$") {
				return nil, lineErr(in.line, "ARG %s: want ARG NAME[=VALUE]", in.args)
			}
			if ok {
				global[k] = v
			}
		case inBuild:
			if err := p.buildInstruction(in, vars, global); err != nil {
				return nil, err
			}
		default:
			if err := p.stageInstruction(cur, in); err != nil {
				return nil, err
			}
		}
	}
	if p.buildStage == "" {
		return nil, fmt.Errorf("no build stage (FROM golang:VERSION AS NAME)")
	}
	p.os, p.arch = vars["TARGETOS"], vars["TARGETARCH"]
	if p.os == "" {
		p.os = "linux"
	}
	if p.arch == "" {
		p.arch = "amd64"
	}
	return p, nil
}

func (p *plan) buildInstruction(in instruction, vars, global map[string]string) error {
	switch in.cmd {
	case "ARG":
		k, v, ok := strings.Cut(in.args, "=")
		if !varName.MatchString(k) || strings.ContainsAny(v, " \t\"'$") {
			return lineErr(in.line, "ARG %s: want ARG NAME=VALUE", in.args)
		}
		if !ok {
			if v, ok = global[k]; !ok {
				return lineErr(in.line, "ARG %s has no default (the values followed here are the defaults)", k)
			}
		}
		vars[k] = v
	case "WORKDIR":
		// The daemonless path builds in the build context (the checkout),
		// where the build stage's COPYs put the module.
	case "COPY":
		if strings.HasPrefix(in.args, "-") || strings.HasPrefix(in.args, "[") {
			return lineErr(in.line, "COPY %s: flags and the JSON form are not followed in the build stage", in.args)
		}
		// Sources from the build context: the checkout holds them.
	case "RUN":
		if strings.HasPrefix(in.args, "-") || strings.HasPrefix(in.args, "[") {
			return lineErr(in.line, "RUN %s: flags and the JSON form are not followed", in.args)
		}
		cmds, err := shellCommands(in.args, vars)
		if err != nil {
			return lineErr(in.line, "RUN: %v", err)
		}
		for _, c := range cmds {
			c.line = in.line
			if err := checkGoCommand(&c); err != nil {
				return lineErr(in.line, "RUN %s: %v", strings.Join(c.argv, " "), err)
			}
			for _, o := range p.commands {
				if c.out != "" && o.out != "" && path.Base(o.out) == path.Base(c.out) {
					return lineErr(in.line, "RUN: two go builds write %s", path.Base(c.out))
				}
			}
			p.commands = append(p.commands, c)
		}
	default:
		return lineErr(in.line, "%s in the build stage is not followed", in.cmd)
	}
	return nil
}

// checkGoCommand accepts `go mod download` and `go build FLAGS -o OUT PKG`,
// setting c.out and c.oArg for the latter.
func checkGoCommand(c *command) error {
	a := c.argv
	if len(a) == 3 && a[0] == "go" && a[1] == "mod" && a[2] == "download" {
		return nil
	}
	if len(a) < 2 || a[0] != "go" || a[1] != "build" {
		return fmt.Errorf("only `go build ... -o /PATH PKG` and `go mod download` are followed")
	}
	var pkgs []string
	for i := 2; i < len(a); i++ {
		w := a[i]
		if !strings.HasPrefix(w, "-") || len(pkgs) > 0 {
			pkgs = append(pkgs, w)
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
		if name == "C" {
			return fmt.Errorf("go build -C is not followed")
		}
		valueAt := i
		if !hasValue && goValueFlags[name] {
			if i+1 == len(a) {
				return fmt.Errorf("go build %s has no value", w)
			}
			i++
			valueAt = i
		}
		if name == "o" {
			if c.out != "" {
				return fmt.Errorf("go build -o is given twice")
			}
			c.oArg = valueAt
			c.out = a[valueAt]
			if hasValue {
				_, c.out, _ = strings.Cut(w, "=")
			}
		}
	}
	if c.out == "" || !path.IsAbs(c.out) || strings.HasSuffix(c.out, "/") {
		return fmt.Errorf("go build needs -o with an absolute file path")
	}
	if len(pkgs) != 1 {
		return fmt.Errorf("go build needs exactly one package, after its flags (got %q)", pkgs)
	}
	return nil
}

func (p *plan) stageInstruction(s *stage, in instruction) error {
	switch in.cmd {
	case "COPY":
		f := strings.Fields(in.args)
		if len(f) != 3 || f[0] != "--from="+p.buildStage {
			return lineErr(in.line, "COPY %s: want COPY --from=%s SRC DST", in.args, p.buildStage)
		}
		if strings.ContainsAny(in.args, "$*?[\"'\\") {
			return lineErr(in.line, "COPY %s: variables, patterns and quoting are not followed", in.args)
		}
		src, dst := f[1], f[2]
		if !path.IsAbs(dst) {
			return lineErr(in.line, "COPY %s: the destination must be absolute", in.args)
		}
		if strings.HasSuffix(dst, "/") {
			dst += path.Base(src)
		}
		built := false
		for _, c := range p.commands {
			built = built || (c.out != "" && c.out == src)
		}
		if !built {
			return lineErr(in.line, "COPY %s: %s is not a go build's output in stage %s", in.args, src, p.buildStage)
		}
		s.copies = append(s.copies, copyFile{line: in.line, src: src, dst: path.Clean(dst)})
	case "USER":
		if f := strings.Fields(in.args); len(f) != 1 || strings.Contains(in.args, "$") {
			return lineErr(in.line, "USER %s: want USER UID[:GID]", in.args)
		}
		s.user = in.args
	case "ENTRYPOINT":
		var ep []string
		if err := json.Unmarshal([]byte(in.args), &ep); err != nil || len(ep) == 0 {
			return lineErr(in.line, "ENTRYPOINT %s: only the JSON form is followed", in.args)
		}
		s.entrypoint = ep
	default:
		return lineErr(in.line, "%s in scratch stage %s is not followed", in.cmd, s.name)
	}
	return nil
}

// shellCommands splits a RUN's shell form into its `&&`-separated commands:
// words with shell quoting, $VAR and ${VAR} from vars, leading VAR=value
// assignments into env. Any other shell syntax is an error.
func shellCommands(s string, vars map[string]string) ([]command, error) {
	var (
		cmds   []command
		cur    command
		word   strings.Builder
		inWord bool
		quoted bool // the word had quotes or expansions (not an assignment name)
		assign bool // the word's first unquoted '=' ends a plain name
	)
	endWord := func() {
		if !inWord {
			return
		}
		w := word.String()
		if assign && len(cur.argv) == 0 {
			cur.env = append(cur.env, w)
		} else {
			cur.argv = append(cur.argv, w)
		}
		word.Reset()
		inWord, quoted, assign = false, false, false
	}
	endCommand := func() error {
		endWord()
		if len(cur.argv) == 0 {
			return fmt.Errorf("an empty command")
		}
		cmds = append(cmds, cur)
		cur = command{}
		return nil
	}
	expand := func(i int, inQuotes bool) (int, error) {
		// s[i] == '$'
		rest := s[i+1:]
		var name string
		n := 0
		if strings.HasPrefix(rest, "{") {
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				return 0, fmt.Errorf("unclosed ${")
			}
			name, n = rest[1:end], end+1
		} else {
			for n < len(rest) && (rest[n] == '_' || rest[n] >= 'A' && rest[n] <= 'Z' || rest[n] >= 'a' && rest[n] <= 'z' || n > 0 && rest[n] >= '0' && rest[n] <= '9') {
				n++
			}
			name = rest[:n]
		}
		if !varName.MatchString(name) {
			return 0, fmt.Errorf("$%s is not followed (only $VAR and ${VAR} of the stage's ARGs)", rest[:min(n+1, len(rest))])
		}
		v, ok := vars[name]
		if !ok {
			return 0, fmt.Errorf("$%s is not an ARG of the build stage", name)
		}
		if !inQuotes && strings.ContainsAny(v, " \t\n*?[") {
			return 0, fmt.Errorf("$%s unquoted would be split or globbed", name)
		}
		word.WriteString(v)
		return i + 1 + n, nil
	}
	for i := 0; i < len(s); {
		ch := s[i]
		switch {
		case ch == ' ' || ch == '\t' || ch == '\n':
			endWord()
			i++
		case strings.HasPrefix(s[i:], "&&"):
			if err := endCommand(); err != nil {
				return nil, err
			}
			i += 2
		case strings.ContainsRune("|;&<>()`*?[{}~!", rune(ch)) || ch == '#' && !inWord:
			return nil, fmt.Errorf("shell syntax %q is not followed (only commands joined by &&)", s[i:min(i+2, len(s))])
		case ch == '\\':
			if i+1 == len(s) {
				return nil, fmt.Errorf("a trailing backslash")
			}
			inWord, quoted = true, true
			word.WriteByte(s[i+1])
			i += 2
		case ch == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("an unclosed single quote")
			}
			inWord, quoted = true, true
			word.WriteString(s[i+1 : i+1+end])
			i += end + 2
		case ch == '"':
			inWord, quoted = true, true
			i++
			for {
				if i == len(s) {
					return nil, fmt.Errorf("an unclosed double quote")
				}
				c := s[i]
				if c == '"' {
					i++
					break
				}
				switch {
				case c == '\\' && i+1 < len(s) && strings.ContainsRune("$`\"\\\n", rune(s[i+1])):
					word.WriteByte(s[i+1])
					i += 2
				case c == '`':
					return nil, fmt.Errorf("command substitution is not followed")
				case c == '$':
					var err error
					if i, err = expand(i, true); err != nil {
						return nil, err
					}
				default:
					word.WriteByte(c)
					i++
				}
			}
		case ch == '$':
			inWord, quoted = true, true
			var err error
			if i, err = expand(i, false); err != nil {
				return nil, err
			}
		default:
			if ch == '=' && !quoted && !assign && varName.MatchString(word.String()) {
				assign = true
			}
			inWord = true
			word.WriteByte(ch)
			i++
		}
	}
	if err := endCommand(); err != nil {
		return nil, err
	}
	return cmds, nil
}
